"""Body size limit (ASGI middleware, counts streamed bytes too), a per-key rate limiter, and
which forwarded headers the server believes (the client address the failed-key limit counts)."""

from __future__ import annotations

import json
import threading
import time

from app.kit.errors import RateLimited, error_body


class BodyLimitMiddleware:
    """413 for a body over `max_bytes`, declared (Content-Length) or streamed (chunked): the body is
    read up to the limit before the app sees it, so an oversized stream is refused whole (never a
    400 from a parser that stopped half-way), and the app never holds more than the limit."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._reject(send)
        if declared is not None and declared.isdigit():
            return await self.app(scope, receive, send)  # the server enforces a declared length
        chunks, seen, more = [], 0, True
        while more:
            msg = await receive()
            if msg["type"] != "http.request":  # client went away
                return
            body = msg.get("body", b"")
            seen += len(body)
            if seen > self.max_bytes:
                return await self._reject(send)
            chunks.append(body)
            more = msg.get("more_body", False)
        replay = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay_receive():
            return replay.pop() if replay else await receive()

        await self.app(scope, replay_receive, send)

    async def _reject(self, send) -> None:
        body = json.dumps(error_body("payload_too_large", f"request body exceeds {self.max_bytes} bytes")).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


class RateLimiter:
    """Token bucket per key holder: `per_minute` units, bursts up to the same number. A refusal
    says when one unit will be back (`Retry-After`)."""

    def __init__(self, per_minute: int):
        self.rate = per_minute / 60.0
        self.capacity = float(per_minute)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def _level(self, who: str, now: float) -> float:
        tokens, last = self._buckets.get(who, (self.capacity, now))
        return min(self.capacity, tokens + (now - last) * self.rate)

    def check(self, who: str, cost: float = 1.0) -> None:
        """Take `cost` units or raise RateLimited (nothing taken)."""
        now = time.monotonic()
        with self._lock:
            tokens = self._level(who, now)
            if tokens < min(cost, self.capacity):
                self._buckets[who] = (tokens, now)
                raise RateLimited("rate limit exceeded; slow down", retry_after_s=(min(cost, self.capacity) - tokens) / self.rate)
            self._buckets[who] = (tokens - cost, now)
            if len(self._buckets) > 100_000:  # forget idle holders (full buckets)
                self._buckets = {k: v for k, v in self._buckets.items() if self._level(k, now) < self.capacity}

    def blocked(self, who: str) -> float:
        """Seconds until `who` has a unit again (0 when it has one now); takes nothing."""
        now = time.monotonic()
        with self._lock:
            tokens = self._level(who, now)
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate


class PgRateLimiter:
    """The same token bucket, kept in PostgreSQL (`rate_buckets`, UNLOGGED) so that one key's
    budget holds across every API process (`memscale serve --workers N`). Each check is one
    upsert on its own autocommit connection, outside the request's transaction (so a read stays
    a read). `name` keeps the limiters' buckets apart."""

    def __init__(self, engine, name: str, per_minute: int):
        self.engine, self.name = engine, name
        self.rate = per_minute / 60.0
        self.capacity = float(per_minute)
        self._calls = 0

    def check(self, who: str, cost: float = 1.0) -> None:
        from app.kit.database.db import forget_full_buckets, take_tokens

        need = min(cost, self.capacity)
        with self.engine.begin() as conn:
            level = take_tokens(conn, f"{self.name}:{who}", cost, need, self.capacity, self.rate)
            self._calls += 1
            if self._calls % 1000 == 0:
                forget_full_buckets(conn, 2 * self.capacity / self.rate)
        if level is not None:
            raise RateLimited("rate limit exceeded; slow down", retry_after_s=(need - level) / self.rate)

    def blocked(self, who: str) -> float:
        from app.kit.database.db import bucket_level

        with self.engine.connect() as conn:
            tokens = bucket_level(conn, f"{self.name}:{who}", self.capacity, self.rate)
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate


def make_limiters(settings, engine) -> dict:
    """The three limiters of an API process: in memory (one process), or shared through
    PostgreSQL (`rate_limit_backend = "postgres"`, what `serve --workers N` sets) over `engine`, a
    small pool of its own (a request holding its connection must never wait for the limiter's)."""

    def one(name: str, per_minute: int):
        if not per_minute:
            return None
        if settings.rate_limit_backend == "postgres":
            return PgRateLimiter(engine, name, per_minute)
        return RateLimiter(per_minute)

    return {
        "rate_limiter": one("rate", settings.rate_limit_per_minute),
        "ingest_limiter": one("ingest", settings.ingest_items_per_minute),
        "auth_failures": one("authfail", settings.auth_failures_per_minute),
    }


def proxy_options(trusted_proxies: list[str]) -> dict:
    """uvicorn's options for `MEMSCALE_TRUSTED_PROXIES`: forwarded headers are read only from a
    connection whose address is listed (then the client is the right-most address of
    X-Forwarded-For that is not itself a listed proxy); with none listed they are never read, not
    even from loopback (uvicorn's default trusts 127.0.0.1, or $FORWARDED_ALLOW_IPS)."""
    if not trusted_proxies:
        return {"proxy_headers": False, "forwarded_allow_ips": ""}
    return {"proxy_headers": True, "forwarded_allow_ips": list(trusted_proxies)}
