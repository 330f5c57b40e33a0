"""The memory service's own (operator) calls to the inference tier, authenticated with the shared
key (app/kit/runtime/signing.py): warming chunk KV after bootstrap, dropping it and erased cartridges
after deletion. Best
effort: the tier is a cache of computable state, so a tier that is down never fails the caller."""

from __future__ import annotations

import logging

import httpx

log = logging.getLogger(__name__)


class TierClient:
    def __init__(self, http: httpx.Client, key: bytes, *, owns_http: bool = False):
        self.http, self.key, self._owns_http = http, key, owns_http

    @classmethod
    def from_settings(cls, settings) -> TierClient | None:
        if not settings.inference_url:
            return None
        return cls(
            httpx.Client(base_url=settings.inference_url, timeout=settings.inference_timeout_s),
            settings.inference_secret(),
            owns_http=True,
        )

    def close(self) -> None:
        """Close the connection pool this client opened (a client handed in stays its owner's)."""
        if self._owns_http:
            self.http.close()

    def __enter__(self) -> TierClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def _auth(self) -> dict:
        return {"Authorization": f"Bearer {self.key.decode()}"}

    def precompute(self, texts: list[str]) -> int:
        if not texts:
            return 0
        try:
            r = self.http.post("/v1/chunks", json={"texts": texts[:256]}, headers=self._auth)
            return len(r.json().get("content_hashes", [])) if r.status_code == 200 else 0
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("chunk KV precompute skipped: %s", type(exc).__name__)
            return 0

    def drop_chunks(self, hashes: list[str]) -> int:
        """Delete the chunk KV of removed content; returns how many the tier held."""
        return self._delete_each("/v1/chunks", hashes)

    def drop_cartridges(self, ids: list) -> int:
        """Evict erased cartridges from the tier's memory and its cartridge folder; returns how
        many it held."""
        return self._delete_each("/v1/cartridges", ids)

    def _delete_each(self, prefix: str, keys: list) -> int:
        """`DELETE <prefix>/<key>` for each distinct key; how many the tier said it held."""
        n = 0
        for key in sorted({str(k) for k in keys}):
            try:
                n += bool(self.http.delete(f"{prefix}/{key}", headers=self._auth).json().get("deleted"))
            except (httpx.HTTPError, ValueError):
                continue
        return n
