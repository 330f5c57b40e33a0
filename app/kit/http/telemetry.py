"""Structured (JSON) logging and OpenTelemetry: a span per request; exporter by configuration."""

from __future__ import annotations

import json
import logging
import time
import uuid

from fastapi import FastAPI


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": round(record.created, 3), "level": record.levelname, "logger": record.name, "msg": record.getMessage()}
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


class RequestMiddleware:
    """A span, an `x-request-id` header and one access-log line per HTTP request, as plain ASGI
    middleware: Starlette's `@app.middleware("http")` (BaseHTTPMiddleware) runs the rest of the app
    in a task behind memory streams, which cost every request a measurable share of its time
    (bench/tools/service_overhead.py). The principal comes from the request state the auth dependency
    filled (`scope["state"]`), after the response has been sent."""

    def __init__(self, app):
        from opentelemetry import trace

        self.app = app
        self.tracer = trace.get_tracer("memscale.api")
        self.log = logging.getLogger("memscale.access")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        rid = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"x-request-id"), None) or uuid.uuid4().hex
        t0 = time.perf_counter()
        status = 500  # unless a response starts

        async def _send(msg):
            nonlocal status
            if msg["type"] == "http.response.start":
                status = msg["status"]
                headers = [(k, v) for k, v in msg.get("headers", []) if k.lower() != b"x-request-id"]
                msg = {**msg, "headers": [*headers, (b"x-request-id", rid.encode("latin-1"))]}
            await send(msg)

        path = scope["path"]
        with self.tracer.start_as_current_span(f"{scope['method']} {path}") as span:
            try:
                await self.app(scope, receive, _send)
            finally:
                span.set_attribute("http.status_code", status)
                p = (scope.get("state") or {}).get("principal")
                # Never log bodies, keys or memory content: method, path, status, timing and ids only.
                self.log.info(
                    "request",
                    extra={
                        "request_id": rid,
                        "method": scope["method"],
                        "path": path,
                        "status": status,
                        "ms": round((time.perf_counter() - t0) * 1000, 2),
                        "user_id": str(p.user_id) if p else None,
                    },
                )


def install_request_middleware(app: FastAPI) -> None:
    app.add_middleware(RequestMiddleware)
