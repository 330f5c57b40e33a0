"""One Settings object (prefix MEMSCALE_), built at start-up and passed down; never read at import."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MEMSCALE_", extra="ignore")

    data_dir: Path = Path(".memscale")
    # Admin/owner URL (migrations, CLI). Unset: the embedded pgserver in <data_dir>/pg.
    database_url: str | None = None
    # URL the API and workers use; unset: database_url with the user swapped for `memscale_app`
    # (a NOSUPERUSER NOBYPASSRLS role the migrations create), so row-level security is in force.
    app_database_url: str | None = None
    app_db_password: str | None = None

    host: str = "127.0.0.1"
    port: int = 8000

    embedding_model: str = "local/all-minilm-l6-v2"
    embedding_dim: int = 384
    llm_model: str = "local/smollm2"
    llm_timeout_s: float = 120.0
    llm_max_retries: int = 2

    max_body_bytes: int = 1_048_576
    max_batch_items: int = 500
    max_query_chars: int = 2_000
    max_k: int = 100
    rate_limit_per_minute: int = 3000  # per key holder (token bucket); 0 = off
    db_pool_size: int = 10

    # Filtered vector search: ef_search for the HNSW pass; visible sets up to this size are
    # searched exactly (no HNSW) so an ACL filter never silently returns short results.
    hnsw_ef_search: int = 400
    exact_search_max_rows: int = 20_000

    # The inference tier (its own process); unset = no KV precompute from bootstrap.
    inference_url: str | None = None
    inference_timeout_s: float = 60.0

    otel_exporter: Literal["none", "console", "otlp"] = "none"
    log_level: str = "INFO"

    @property
    def pg_dir(self) -> Path:
        return self.data_dir.resolve() / "pg"
