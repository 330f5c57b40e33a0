"""The API process: `create_app(settings)`; resources are built in the lifespan, never at import."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI, Request

import app.kit.registry  # noqa: F401  (every model mapped before the first flush)
from app.auth.enforcer import Authorizer
from app.config import Settings
from app.embedders.pool import Embedders
from app.embedders.service import check_start
from app.kit.database.db import make_engine, make_sessionmaker
from app.kit.database.pg import app_url, check_versions
from app.kit.database.replicas import LsnHeaderMiddleware, replica_set
from app.kit.database.repository import ping
from app.kit.errors import install_error_handlers
from app.kit.http.limits import BodyLimitMiddleware, make_limiters
from app.kit.http.read_gate import ReadGate
from app.kit.http.telemetry import install_request_middleware, setup_logging, setup_tracing
from app.kit.runtime.embedding import Embedder, make_embedder
from app.kit.runtime.fairness import FairEmbedder
from app.resources import Resources
from app.search.dates import warm_up
from app.search.tuning import DEFAULT_TUNING


def create_app(settings: Settings | None = None, *, embedder: Embedder | None = None, gateway=None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        setup_logging(settings.log_level)
        engine = make_engine(app_url(settings), pool_size=settings.db_pool_size)
        with engine.connect() as conn:  # a clear error now, not a strange one at the first search
            check_versions(conn)
        app.state.settings = settings
        app.state.engine = engine
        app.state.sessions = make_sessionmaker(engine, audit_key=settings.audit_secret())
        app.state.authorizer = Authorizer()
        with app.state.sessions() as db:  # an org whose vectors another model made is not served
            check_start(db, settings.embedding_model)

        def fair(inner):
            if not settings.embed_fairness:
                return inner
            return FairEmbedder(
                inner,
                slice_tokens=settings.embed_slice_tokens,
                max_pending_per_key=settings.embed_queue_per_key,
                max_pending=settings.embed_queue_total,
            )

        app.state.embedder = fair(embedder or make_embedder(settings))
        # Other models on first use; the configured one is read from app.state at each use.
        app.state.embedders = Embedders(settings, app.state.embedder, wrap=fair, current=lambda: app.state.embedder)
        app.state.read_gate = (
            ReadGate(per_key=settings.reads_per_key, max_waiting=settings.read_queue_per_key)
            if settings.reads_per_key > 0
            else None
        )
        # The LLM gateway loads on first use (summaries, token counts), not at start-up.
        app.state.resources = Resources(settings, _embedder=app.state.embedder, _gateway=gateway, _embedders=app.state.embedders)
        limits_engine = make_engine(app_url(settings), pool_size=4) if settings.rate_limit_backend == "postgres" else None
        for name, limiter in make_limiters(settings, limits_engine).items():  # per process, or shared in PostgreSQL
            setattr(app.state, name, limiter)
        app.state.replicas = replica_set(settings, engine)  # None without MEMSCALE_READ_REPLICA_URLS
        if app.state.replicas is not None:
            app.state.replicas.start()
        warm_up()  # dateparser's language data, so the first instructed search is not slow
        try:
            yield
        finally:
            if app.state.replicas is not None:
                app.state.replicas.close()
            if limits_engine is not None:
                limits_engine.dispose()
            engine.dispose()

    app = FastAPI(
        title="memscale",
        version="1.0.0",
        lifespan=lifespan,
        description="Memory service for AI agents (REST contract v1, served at /openapi.json).",
    )
    app.state.tuning = DEFAULT_TUNING  # the ranking's settings (app/search/tuning.py); a benchmark may set its own
    install_error_handlers(app)
    install_request_middleware(app)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(LsnHeaderMiddleware)
    setup_tracing(app, settings.otel_exporter)

    from app.audit.endpoints import router as audit
    from app.branches.endpoints import router as branches
    from app.context.endpoints import router as context
    from app.embedders.endpoints import router as embedders
    from app.episodes.endpoints import router as episodes
    from app.erasure.endpoints import router as erasure
    from app.feedback.endpoints import router as feedback
    from app.jobs.endpoints import router as jobs
    from app.knowledge.endpoints import router as knowledge
    from app.lineage.endpoints import router as lineage
    from app.memories.endpoints import router as memories
    from app.search.endpoints import router as search
    from app.sessions.endpoints import router as sessions
    from app.ui.endpoints import router as ui

    for r in (
        episodes,
        memories,
        search,
        jobs,
        context,
        sessions,
        lineage,
        audit,
        erasure,
        ui,
        knowledge,
        branches,
        feedback,
        embedders,
    ):
        app.include_router(r)

    @app.get("/healthz", tags=["ops"])
    def healthz():
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"], responses={503: {"description": "database unreachable"}})
    def readyz(request: Request):
        with request.app.state.engine.connect() as conn:
            ping(conn)
        return {"status": "ready"}

    return app
