"""Structured (JSON) logging and OpenTelemetry: a span per request; exporter by configuration."""

from __future__ import annotations

import json
import logging
import time
import uuid

from fastapi import FastAPI, Request


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": round(record.created, 3), "level": record.levelname, "logger": record.name,
               "msg": record.getMessage()}
        for key in ("request_id", "method", "path", "status", "ms", "user_id"):
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def setup_logging(level: str) -> None:
    root = logging.getLogger("memscale")
    if not any(isinstance(h.formatter, JsonFormatter) for h in root.handlers):
        h = logging.StreamHandler()
        h.setFormatter(JsonFormatter())
        root.addHandler(h)
    root.setLevel(level)
    root.propagate = False


def setup_tracing(app: FastAPI, exporter: str) -> None:
    """Spans per request. `none` (default, tests) installs no provider: the API is a no-op."""
    if exporter == "none":
        return
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": "memscale"}))
    if exporter == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # optional extra

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)


def install_request_middleware(app: FastAPI) -> None:
    from opentelemetry import trace

    tracer = trace.get_tracer("memscale.api")
    log = logging.getLogger("memscale.access")

    @app.middleware("http")
    async def _observe(request: Request, call_next):
        rid = request.headers.get("x-request-id") or uuid.uuid4().hex
        t0 = time.perf_counter()
        route = request.url.path
        with tracer.start_as_current_span(f"{request.method} {route}") as span:
            response = await call_next(request)
            span.set_attribute("http.status_code", response.status_code)
        ms = round((time.perf_counter() - t0) * 1000, 2)
        response.headers["x-request-id"] = rid
        p = getattr(request.state, "principal", None)
        # Never log bodies, keys or memory content: method, path, status, timing and ids only.
        log.info("request", extra={"request_id": rid, "method": request.method, "path": route,
                                   "status": response.status_code, "ms": ms,
                                   "user_id": str(p.user_id) if p else None})
        return response
