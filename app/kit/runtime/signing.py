"""The key the memory service and the inference tier share, and the signed handoff token.

The service decides *what* a principal may use in the inference tier (the chunk hashes and
cartridge ids of one /v1/context handoff); the tier only computes. So the service signs that
grant (HMAC-SHA256 with the shared key) and the tier serves only what a valid, unexpired grant
names. The operator's own calls to the tier (precompute, raw texts, deletion, benchmarks) present
the shared key itself.

The key: `MEMSCALE_INFERENCE_KEY` when set (both tiers on different hosts read the same secret);
otherwise a random key generated once in `<data_dir>/inference.key` (mode 0600), which both
processes of a single-machine install read. The key never appears in a response or a log.

Token: `mst1.<base64url(json grant)>.<base64url(hmac)>`; grant = {org, sub, chunks, cartridges, exp}
and, when the service sets them, `max_prompt_tokens` and `max_new_tokens`: the most a request on
this token may prefill and generate. Being signed, no bearer can raise them; the tier
keys its fairness by `org` (opaque to it) and by the token itself (`Grant.token_id`).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "mst1"


def load_key(data_dir: Path, configured: str | None = None, name: str = "inference.key") -> bytes:
    """`configured` if set, else a random key generated once in `<data_dir>/<name>` (0600)."""
    if configured:
        return configured.encode()
    return _file_key(str(Path(data_dir).resolve() / name))


@functools.lru_cache(maxsize=8)
def _file_key(p: str) -> bytes:
    """Processes that start at once (test workers, `serve --workers`) agree on one key: each writes
    its candidate to a file of its own and links it into place, which fails if another got there
    first; nobody ever reads a key half written."""
    path = Path(p)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, secrets.token_hex(32).encode())
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process's key is the key
        finally:
            os.unlink(tmp)
    return path.read_bytes().strip()


def _b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def _unb64(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def mac_hex(key: bytes, msg: str) -> str:
    return hmac.new(key, msg.encode(), hashlib.sha256).hexdigest()


def _mac(key: bytes, msg: str) -> str:
    return _b64(hmac.new(key, msg.encode(), hashlib.sha256).digest())


@dataclass(frozen=True)
class Grant:
    """What a bearer may use in the inference tier. `operator`: the shared key itself (anything)."""

    operator: bool
    chunks: frozenset[str] = frozenset()
    cartridges: frozenset[str] = frozenset()
    org: str | None = None
    sub: str | None = None
    token_id: str = "operator"  # a short digest of the bearer value: the tier's per-token key
    max_prompt_tokens: int | None = None  # signed caps (None: not in the token)
    max_new_tokens: int | None = None

    def may_use_chunk(self, content_hash: str) -> bool:
        return self.operator or content_hash in self.chunks

    def may_use_cartridge(self, cartridge_id: str) -> bool:
        return self.operator or cartridge_id in self.cartridges


def sign(
    key: bytes,
    *,
    org: str,
    sub: str,
    chunks: list[str],
    cartridges: list[str],
    ttl_s: int,
    now: float | None = None,
    max_prompt_tokens: int | None = None,
    max_new_tokens: int | None = None,
) -> str:
    grant = {
        "org": org,
        "sub": sub,
        "chunks": sorted(set(chunks)),
        "cartridges": sorted(set(cartridges)),
        "exp": int((now if now is not None else time.time()) + ttl_s),
    }
    for name, cap in (("max_prompt_tokens", max_prompt_tokens), ("max_new_tokens", max_new_tokens)):
        if cap is not None:
            grant[name] = int(cap)
    body = f"{PREFIX}.{_b64(json.dumps(grant, separators=(',', ':'), sort_keys=True).encode())}"
    return f"{body}.{_mac(key, body)}"


class InvalidToken(ValueError):
    pass


def verify(key: bytes, bearer: str, *, now: float | None = None) -> Grant:
    """The grant a bearer value carries; raises InvalidToken (forged, malformed or expired)."""
    if hmac.compare_digest(bearer.encode(), key):
        return Grant(operator=True)
    parts = bearer.split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        raise InvalidToken("malformed credentials")
    body = f"{parts[0]}.{parts[1]}"
    if not hmac.compare_digest(_mac(key, body), parts[2]):
        raise InvalidToken("invalid signature")
    try:
        g = json.loads(_unb64(parts[1]))
        exp, chunks, carts = int(g["exp"]), g["chunks"], g["cartridges"]
        caps = {k: int(g[k]) for k in ("max_prompt_tokens", "max_new_tokens") if g.get(k) is not None}
    except (ValueError, KeyError, TypeError):
        raise InvalidToken("malformed grant") from None
    if exp < (now if now is not None else time.time()):
        raise InvalidToken("token expired")
    return Grant(
        operator=False,
        chunks=frozenset(map(str, chunks)),
        cartridges=frozenset(map(str, carts)),
        org=g.get("org"),
        sub=g.get("sub"),
        token_id=hashlib.sha256(parts[2].encode()).hexdigest()[:16],
        **caps,
    )
