"""One Settings object (prefix MEMSCALE_), built at start-up and passed down; never read at import."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MEMSCALE_", extra="ignore")

    data_dir: Path = Path(".memscale")
    # Admin/owner URL (migrations, CLI). Unset: the embedded PostgreSQL 18 in <data_dir>/pg18.
    database_url: str | None = None
    # URL the API and workers use; unset: database_url with the user swapped for `memscale_app`
    # (a NOSUPERUSER NOBYPASSRLS role the migrations create), so row-level security is in force.
    app_database_url: str | None = None
    app_db_password: str | None = None
    # The embedded server's buffer pool ("4GB"); unset: a quarter of the machine's memory, 256 MB to
    # 8 GB (app/kit/database/embedded_pg.py). An operator's own server is sized by its operator.
    pg_shared_buffers: str | None = None

    host: str = "127.0.0.1"
    port: int = 8000

    embedding_model: str = "local/all-minilm-l6-v2"
    embedding_dim: int = 384
    # The local model's encoder: ONNX Runtime (the same weights exported once into model_cache_dir,
    # checked against torch at every load; ~2.5x faster per query) or eager torch.
    embedding_backend: Literal["onnx", "torch"] = "onnx"
    model_cache_dir: Path = Path("~/.cache/memscale")
    # New vocabulary words of the public list (the MiniLM tokenizer's whole words) looked up in a
    # table embedded once per model into model_cache_dir (`memscale serve` builds it for a local
    # model) instead of embedded per write (app/kit/runtime/wordvectors.py).
    word_vectors: bool = True
    llm_model: str = "local/smollm2"
    llm_timeout_s: float = 120.0
    llm_max_retries: int = 2
    # Instructed retrieval: also ask llm_model to read the instruction (fields the rules left unset).
    instruction_llm: bool = False

    max_body_bytes: int = 1_048_576
    max_batch_items: int = 500
    max_query_chars: int = 2_000
    max_k: int = 100
    idempotency_ttl_s: int = 24 * 3600  # stored Idempotency-Key replies expire (and are purged)
    # Fair embedding (app/kit/runtime/fairness.py): write slices, bounded queue, items per key per minute.
    embed_fairness: bool = True  # False: one call at a time, first come first served (the old behaviour)
    embed_slice_tokens: int = 512
    embed_queue_per_key: int = 1000
    embed_queue_total: int = 4000
    ingest_items_per_minute: int = 6000  # per key holder, counted in items (a batch of 500 costs 500); 0 = off
    auth_failures_per_minute: int = 60  # failed authentications per client address; 0 = off
    # Reads (search, context) one key holder runs at once in a process; the rest wait their turn
    # (app/kit/http/read_gate.py), up to read_queue_per_key waiting, then 429. 0 = no gate.
    reads_per_key: int = 1
    read_queue_per_key: int = 8
    rate_limit_per_minute: int = 3000  # per key holder (token bucket); 0 = off
    # Where the three limiters keep their buckets: this process's memory, or PostgreSQL (shared by
    # every API process; `memscale serve --workers N` with N > 1 picks it unless set).
    rate_limit_backend: Literal["memory", "postgres"] = "memory"
    db_pool_size: int = 10

    # Read replicas (app/kit/database/replicas.py): comma-separated URLs of streaming standbys, for the
    # app role. Search, context, GET of one item and lineage read there; writes go to the primary.
    read_replica_urls: str = ""
    replica_max_lag_bytes: int = 16 * 1024 * 1024  # a standby further behind the primary is skipped
    replica_wait_ms: int = 200  # a read with a Memscale-LSN waits this long for replay, then reads the primary
    replica_check_interval_s: float = 0.5  # health and lag probe of each standby
    replica_backoff_max_s: float = 30.0  # a failed standby is retried after 0.5 s, 1 s, 2 s ... up to this

    # Filtered vector search (app/search/repository.vector_ids): the candidate list of pgvector's
    # iterative index scan (100: recall@10 0.99 vs 0.95 at 40, bench/speed/filtered_knn); fewer than k
    # visible rows found always ends in the exact search, so an ACL filter never returns short.
    hnsw_ef_search: int = 100
    exact_search_max_rows: int = 20_000

    # The inference tier (its own process); unset = no KV precompute from bootstrap.
    inference_url: str | None = None
    inference_timeout_s: float = 60.0
    # Shared secret of the two tiers (signs handoff tokens; the operator's calls present it).
    # Unset: a random key generated once in <data_dir>/inference.key (mode 0600).
    inference_key: str | None = None
    handoff_ttl_s: int = 600  # how long a /v1/context handoff token is valid
    # Seals each audit event (HMAC of its chain hash). Unset: <data_dir>/audit.key (mode 0600).
    audit_key: str | None = None

    # Database sources API-created bootstrap jobs may name (name -> SQLAlchemy URL); none by default.
    bootstrap_sources: dict[str, str] = {}

    otel_exporter: Literal["none", "console", "otlp"] = "none"
    log_level: str = "INFO"

    # Signed into each /v1/context handoff token (app/context/handoff.py): the most one request on
    # the token may prefill (system + chunks + prompt, in the tier model's tokens) and generate.
    # The tier refuses more (400); a bearer cannot raise them.
    handoff_max_prompt_tokens: int = 3072
    handoff_max_new_tokens: int = 512

    # Reverse proxies whose X-Forwarded-For / X-Forwarded-Proto the server believes (addresses or
    # CIDRs, comma-separated or a JSON list); none by default, so the client address that the
    # failed-key limit counts is the connection's own (uvicorn trusted loopback, and a
    # rotating header escaped the limit). `memscale serve` hands this list to uvicorn.
    trusted_proxies: Annotated[list[str], NoDecode] = []

    @field_validator("pg_shared_buffers")
    @classmethod
    def _pg_size(cls, value):
        from app.kit.database.embedded_pg import size_bytes

        if value is not None:
            size_bytes(value)  # "512MB", "2GB": refused at start-up, not by the server at its start
        return value

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _proxy_list(cls, value):
        import ipaddress
        import json

        if isinstance(value, str):
            value = json.loads(value) if value.strip().startswith("[") else [v for v in value.split(",") if v.strip()]
        out = []
        for v in value:
            try:  # an address or a network; never a host name or "*" (trusting every client is no limit)
                out.append(str(ipaddress.ip_network(str(v).strip(), strict=False)))
            except ValueError:
                raise ValueError(f"MEMSCALE_TRUSTED_PROXIES: {v!r} is not an IP address or CIDR") from None
        return out

    def audit_secret(self) -> bytes:
        """Seals audit events (app/audit/service.py); held by the service, never by the database."""
        from app.kit.runtime.signing import load_key

        return load_key(self.data_dir, self.audit_key, name="audit.key")

    def inference_secret(self) -> bytes:
        from app.kit.runtime.signing import load_key

        return load_key(self.data_dir, self.inference_key)

    @property
    def pg_dir(self) -> Path:
        return self.data_dir.resolve() / "pg18"  # <data_dir>/pg held pgserver's PostgreSQL 16 (not reused)
