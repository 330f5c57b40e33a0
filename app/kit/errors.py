"""One error type with a status code and a stable code; one handler renders it (the REST contract)."""

from __future__ import annotations

import logging
import re

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("memscale.errors")


class AppError(Exception):
    status_code = 400
    code = "bad_request"
    headers: dict | None = None

    def __init__(self, message: str, *, code: str | None = None, status_code: int | None = None, headers: dict | None = None):
        super().__init__(message)
        self.message = message
        if headers:
            self.headers = headers
        if code:
            self.code = code
        if status_code:
            self.status_code = status_code


class NotFound(AppError):
    status_code, code = 404, "not_found"


class Forbidden(AppError):
    status_code, code = 403, "forbidden"


class Unauthorized(AppError):
    status_code, code = 401, "unauthorized"


class Conflict(AppError):
    status_code, code = 409, "conflict"


class PayloadTooLarge(AppError):
    status_code, code = 413, "payload_too_large"


class BadRequest(AppError):
    status_code, code = 400, "bad_request"


class RateLimited(AppError):
    status_code, code = 429, "rate_limited"

    def __init__(self, message: str, *, retry_after_s: float = 1.0, code: str | None = None):
        super().__init__(message, code=code, headers={"Retry-After": str(max(1, int(retry_after_s + 0.999)))})


def error_body(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


def error_response(status: int, code: str, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(error_body(code, message), status_code=status, headers=headers)


# For `responses=` so the OpenAPI document shows the error shape.
ERROR_SCHEMA = {
    "description": "Error",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["error"],
                "properties": {
                    "error": {
                        "type": "object",
                        "required": ["code", "message"],
                        "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                    }
                },
            }
        }
    },
}
COMMON_ERRORS = {s: ERROR_SCHEMA for s in (400, 401, 403, 404, 409, 413, 422, 429, 503)}

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "rate_limited",
}


_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def _documented_methods(request: Request) -> list[str] | None:
    """The methods the OpenAPI document lists for the request's path (concrete paths win over
    templated ones, as OpenAPI says); None for a path it does not document."""
    paths = request.app.openapi().get("paths", {})
    for template in sorted(paths, key=lambda p: p.count("{")):
        parts = re.split(r"(\{[^/}]+\})", template)
        if re.fullmatch("".join("[^/]+" if x.startswith("{") else re.escape(x) for x in parts), request.url.path):
            return sorted(m.upper() for m in paths[template] if m in _METHODS)
    return None


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AppError)
    async def _app_error(_: Request, exc: AppError):
        return error_response(exc.status_code, exc.code, exc.message, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError):
        parts = []
        for e in exc.errors()[:5]:
            loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
            parts.append(f"{loc or 'body'}: {e.get('msg')}")
        return error_response(422, "validation_error", "; ".join(parts) or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        headers = getattr(exc, "headers", None)  # keep them: a 405 must carry Allow (RFC 9110)
        if exc.status_code == 405 and (documented := _documented_methods(request)):
            # Starlette's Allow names only the first route on the path; list every documented method.
            headers = {**(headers or {}), "Allow": ", ".join(documented)}
        return error_response(exc.status_code, code, str(exc.detail), headers=headers)

    @app.exception_handler(OperationalError)
    async def _db_down(_: Request, exc: OperationalError):
        log.warning("database unavailable: %s", type(exc.orig).__name__)
        return error_response(
            503, "database_unavailable", "the database is not reachable; retry later", headers={"Retry-After": "1"}
        )

    @app.exception_handler(PoolTimeout)
    async def _pool_exhausted(_: Request, exc: PoolTimeout):
        # Every pooled connection stayed busy for pool_timeout: an overload, not a bug.
        log.warning("database connection pool exhausted")
        return error_response(
            503, "database_busy", "all database connections are busy; retry later", headers={"Retry-After": "1"}
        )

    @app.exception_handler(DataError)
    async def _bad_value(_: Request, exc: DataError):
        # SQLSTATE class 22 (e.g. U+0000 in text/jsonb): the input cannot be stored, not a server fault.
        log.info("value refused by the database: %s", type(exc.orig).__name__)
        return error_response(422, "invalid_value", "a value in the request cannot be stored or compared")

    @app.exception_handler(DBAPIError)
    async def _db_error(_: Request, exc: DBAPIError):
        if exc.connection_invalidated:
            return error_response(
                503, "database_unavailable", "the database connection was lost; retry later", headers={"Retry-After": "1"}
            )
        log.exception("database error")
        return error_response(500, "internal_error", "internal error")

    @app.exception_handler(Exception)
    async def _unhandled(_: Request, exc: Exception):
        log.exception("unhandled error")
        return error_response(500, "internal_error", "internal error")
