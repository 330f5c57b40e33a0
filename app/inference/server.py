"""HTTP face of the inference tier (internal; the memory service calls it).

Design choices:
- ``create_app(config)`` builds the app; the model and the chunk store are created in the
  lifespan (or handed in, for tests), never at import.
- Engine work runs in FastAPI's thread pool, one request at a time (a forward pass already uses
  every core), under the fair scheduler (``scheduler.py``): a request holds the engine
  for at most a quantum when others wait, the next turn goes to the least served org, then token,
  and requests beyond the per-token, per-org or total bounds, or over their rate, are 429
  ``rate_limited`` with ``Retry-After`` at once. ``/v1/generate`` admits on the event loop (so a
  full thread pool cannot hide the queue) and runs in a worker thread. ``ttft_s`` is measured from
  the moment the handler starts (queueing for the engine, chunk loading or computing, and
  cartridge resolution included) to the choice of the first generated token.
- Caps of a handoff token: prompt tokens (system + chunks + prompt) and ``max_tokens`` at most
  the token's signed ``max_prompt_tokens`` / ``max_new_tokens`` and the tier's own
  ``handoff_max_*`` (which also apply to a token without them); over them, 400. The operator
  key is held only to the engine's context limit.
- Cartridges: ``resolve_cartridges(ids) -> prefix_kv`` is pluggable (see docs/inference.md);
  until something is plugged in, every id is unknown (404). It raises :class:`CartridgeNotFound`
  for an unknown id.
- Errors all render as ``{"error": {"code", "message"}}``: 404 unknown chunk hash or cartridge,
  400 prompt too long or over a token's cap, 413 body too large, 422 malformed body, 401 no or bad
  credentials, 403 an operator call made with a handoff token, 429 over a bound or rate.
- Authentication (app/kit/runtime/signing.py): every call but /healthz presents ``Authorization: Bearer``
  with either the shared key (the operator: precompute, raw texts, deletion, benchmarks) or a
  handoff token the memory service signed, which authorises exactly its chunk hashes and
  cartridge ids until it expires. A hash or cartridge a token does not name reads exactly like
  one that does not exist (same status, code and message), so the tier is no oracle for what
  other tenants stored. The body is capped before parsing (``max_body_bytes``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.inference.blend import BlendConfig
from app.inference.engine import Engine, EngineConfig, PromptTooLong
from app.inference.kv import ChunkKV, PrefixKV, prefix_length
from app.inference.scheduler import Busy, FairScheduler, SchedulerConfig, Ticket
from app.inference.schemas import ChunkIn, ChunksIn, ChunksOut, ErrorOut, GenerateIn, GenerateOut, Timings
from app.inference.store import ChunkNotFound, ChunkStore, StoreConfig, content_hash
from app.kit.http.limits import BodyLimitMiddleware
from app.kit.runtime.signing import Grant, InvalidToken, verify

log = logging.getLogger(__name__)

CartridgeResolver = Callable[[list[str]], PrefixKV]


class InferenceError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


class CartridgeNotFound(KeyError):
    """Raised by a cartridge resolver for an id it does not know."""


def no_cartridges(ids: list[str]) -> PrefixKV:
    """The resolver until cartridges are plugged in: every id is unknown."""
    raise CartridgeNotFound(ids[0])


@dataclass
class ServerConfig:
    engine: EngineConfig
    store_root: Path  # chunk KV files: <store_root>/<kv_id>/...
    mem_bytes: int = 2 * 2**30
    disk_bytes: int = 20 * 2**30
    blend: BlendConfig = field(default_factory=BlendConfig)
    max_chunk_tokens: int = 2048
    max_texts: int = 256  # per /v1/chunks call
    key: bytes | None = None  # the shared secret (app/kit/runtime/signing.py); required
    max_body_bytes: int = 4 * 2**20
    schedule: SchedulerConfig = field(default_factory=SchedulerConfig)  # fairness and bounds (scheduler.py)
    # a handoff token's request: at most these (or the token's own signed caps, if lower)
    handoff_max_prompt_tokens: int = 3072
    handoff_max_new_tokens: int = 512


def _error(status: int, code: str, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"code": code, "message": message}}, headers=headers)


# ---- app ----------------------------------------------------------------------------------------
def create_app(
    config: ServerConfig | None = None,
    *,
    engine: Engine | None = None,
    store: ChunkStore | None = None,
    resolve_cartridges: CartridgeResolver | None = None,
    cartridge_resolver_factory: Callable[[Engine], CartridgeResolver] | None = None,
    key: bytes | None = None,
) -> FastAPI:
    """Build the app. Give ``config`` (the lifespan loads the model), or a loaded ``engine`` +
    ``store`` (tests). ``cartridge_resolver_factory(engine)`` builds a resolver once the model is
    loaded; ``resolve_cartridges`` plugs one in directly; ``app.state.resolve_cartridges`` may also
    be replaced at any time."""
    if config is None and (engine is None or store is None):
        raise ValueError("create_app needs a ServerConfig, or both an engine and a store")
    blend_default = config.blend if config else BlendConfig()
    key = key or (config.key if config else None)
    if not key:
        raise ValueError("the inference tier needs the shared key (MEMSCALE_INFERENCE_KEY or <data_dir>/inference.key)")

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        eng = engine or Engine.load(config.engine)
        st = store or ChunkStore(eng, StoreConfig(config.store_root, config.mem_bytes, config.disk_bytes))
        app.state.engine, app.state.store = eng, st
        app.state.scheduler = FairScheduler(config.schedule if config else SchedulerConfig())
        hooks = app.state.scheduler.attach(eng.model)
        if resolve_cartridges is not None:
            app.state.resolve_cartridges = resolve_cartridges
        elif cartridge_resolver_factory is not None:
            app.state.resolve_cartridges = cartridge_resolver_factory(eng)
        else:
            app.state.resolve_cartridges = no_cartridges
        try:
            yield
        finally:
            FairScheduler.detach(hooks)

    app = FastAPI(title="memscale inference tier", version="1", lifespan=lifespan)
    max_chunk_tokens = config.max_chunk_tokens if config else ServerConfig.max_chunk_tokens
    max_texts = config.max_texts if config else ServerConfig.max_texts
    caps = (
        (config.handoff_max_prompt_tokens, config.handoff_max_new_tokens)
        if config
        else (ServerConfig.handoff_max_prompt_tokens, ServerConfig.handoff_max_new_tokens)
    )
    errors = {s: {"model": ErrorOut} for s in (400, 401, 403, 404, 413, 422, 429)}

    async def grant(request: Request) -> Grant:
        scheme, _, value = (request.headers.get("authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not value:
            raise InferenceError(401, "unauthorized", "missing credentials")
        try:
            return verify(key, value.strip())
        except InvalidToken:
            raise InferenceError(401, "unauthorized", "invalid or expired credentials") from None

    async def operator(g: Grant = Depends(grant)) -> Grant:
        if not g.operator:
            raise InferenceError(403, "forbidden", "this call needs the operator key")
        return g

    @app.exception_handler(InferenceError)
    async def _inference_error(request: Request, exc: InferenceError):
        return _error(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return _error(422, "validation_error", f"{where}: {first.get('msg', 'invalid request')}")

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):
        log.exception("unhandled error")
        return _error(500, "internal_error", "internal error")

    @app.get("/healthz")
    def healthz(request: Request) -> dict:
        if getattr(request.app.state, "engine", None) is None:
            raise InferenceError(503, "not_ready", "model not loaded")
        return {"status": "ok", "model_id": request.app.state.engine.model_id}

    @app.post("/v1/chunks", response_model=ChunksOut, responses=errors)
    def chunks(body: ChunksIn, request: Request, g: Grant = Depends(operator)) -> ChunksOut:
        if len(body.texts) > max_texts:
            raise InferenceError(400, "too_many_texts", f"at most {max_texts} texts per call")
        eng: Engine = request.app.state.engine
        with _turn(request.app.state.scheduler, g):
            for i, text in enumerate(body.texts):
                _check_chunk_text(eng, text, i, max_chunk_tokens)
            hashes = request.app.state.store.precompute(body.texts)
        return ChunksOut(content_hashes=hashes)

    @app.delete("/v1/chunks/{content_hash}", responses=errors)
    def delete_chunk(content_hash: str, request: Request, g: Grant = Depends(operator)) -> dict:
        """Right to be forgotten: drop a chunk's KV from both tiers (idempotent)."""
        with _turn(request.app.state.scheduler, g, bounded=False):
            return {"deleted": request.app.state.store.delete(content_hash)}

    @app.delete("/v1/cartridges/{cartridge_id}", responses=errors)
    def delete_cartridge(cartridge_id: str, request: Request, g: Grant = Depends(operator)) -> dict:
        """Right to be forgotten: an erased cartridge leaves memory and disk (idempotent). A
        resolver that cannot forget holds nothing of its own to drop."""
        forget = getattr(request.app.state.resolve_cartridges, "forget", None)
        with _turn(request.app.state.scheduler, g, bounded=False):
            return {"deleted": bool(forget(cartridge_id)) if forget is not None else False}

    @app.post("/v1/generate", response_model=GenerateOut, responses=errors)
    async def generate(body: GenerateIn, request: Request, g: Grant = Depends(grant)) -> GenerateOut:
        t0 = time.perf_counter()
        state = request.app.state
        _authorise(g, body)
        limit = (
            Caps(None, None)
            if g.operator
            else Caps(min(caps[0], g.max_prompt_tokens or caps[0]), min(caps[1], g.max_new_tokens or caps[1]))
        )
        if limit.new_tokens is not None and body.max_tokens > limit.new_tokens:
            raise InferenceError(
                400, "max_tokens_too_large", f"max_tokens {body.max_tokens} exceeds this token's limit of {limit.new_tokens}"
            )
        ticket = _admit(state.scheduler, g)
        try:
            return await run_in_threadpool(_generate, state, body, ticket, limit, t0)
        finally:
            state.scheduler.close(ticket)

    def _generate(state, body: GenerateIn, ticket: Ticket, limit: Caps, t0: float) -> GenerateOut:
        eng: Engine = state.engine
        with state.scheduler.turn(ticket):
            prefix_kv = _resolve(state.resolve_cartridges, body.cartridges)
            # token ids first: an over-long request is refused before any KV is computed
            refs = [_chunk_ids(eng, state.store, c, i, max_chunk_tokens) for i, c in enumerate(body.chunks)]
            n_prompt = int(eng.system_ids.numel() + eng.query_ids(body.prompt).numel()) + sum(
                int(r.token_ids.numel()) for r in refs
            )
            if limit.prompt_tokens is not None and n_prompt > limit.prompt_tokens:
                raise InferenceError(
                    400, "prompt_too_long", f"prompt of {n_prompt} tokens exceeds this token's limit of {limit.prompt_tokens}"
                )
            p = prefix_length(prefix_kv)
            try:
                eng.check_length(p, n_prompt, body.max_tokens)
                loaded = [
                    r if r.kv is not None or body.mode == "full" else state.store.get(state.store.put(c.text))
                    for r, c in zip(refs, body.chunks)
                ]
                ratio = blend_default.recompute_ratio if body.recompute_ratio is None else body.recompute_ratio
                gen = eng.generate(
                    body.prompt,
                    loaded,
                    mode=body.mode,
                    blend=replace(blend_default, recompute_ratio=ratio),
                    prefix_kv=prefix_kv,
                    max_tokens=body.max_tokens,
                )
            except PromptTooLong as e:
                raise InferenceError(400, "prompt_too_long", str(e)) from None
            except ChunkNotFound as e:  # a text chunk erased while it was being computed
                raise InferenceError(404, "chunk_not_found", f"chunk {e.args[0] if e.args else '?'} was deleted") from None
        total = gen.finished_at - t0
        return GenerateOut(
            text=gen.text,
            timings=Timings(
                ttft_s=gen.first_token_at - t0, total_s=total, tokens_per_s=len(gen.token_ids) / total if total > 0 else 0.0
            ),
            prompt_tokens=gen.prompt_tokens,
            recomputed_tokens=gen.recomputed_tokens,
        )

    max_body = config.max_body_bytes if config else ServerConfig.max_body_bytes
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_body)
    return app


@dataclass(frozen=True)
class Caps:
    """The most one request may prefill and generate (None: only the engine's context limit)."""

    prompt_tokens: int | None
    new_tokens: int | None


def _admit(scheduler: FairScheduler, g: Grant) -> Ticket:
    """A ticket keyed by the grant's org and token (the operator: its own key), or 429."""
    try:
        return scheduler.admit(g.org or f"token:{g.token_id}", g.token_id, operator=g.operator)
    except Busy as e:
        raise InferenceError(429, "rate_limited", e.message, {"Retry-After": str(max(1, int(e.retry_after_s + 0.999)))}) from None


@contextmanager
def _turn(scheduler: FairScheduler, g: Grant, *, bounded: bool = True):
    """Admit and hold the engine for one operator call (``bounded=False``: an erasure, never refused)."""
    ticket = _admit(scheduler, g) if bounded else scheduler.admit("", "", operator=True, bounded=False)
    with scheduler.turn(ticket):
        yield


def _authorise(g: Grant, body: GenerateIn) -> None:
    """A handoff token uses stored chunks by hash and the cartridges it names; anything else it
    asks for is answered exactly as if it did not exist."""
    if g.operator:
        return
    for i, c in enumerate(body.chunks):
        if c.content_hash is None:
            raise InferenceError(403, "forbidden", "raw chunk texts need the operator key; send content hashes")
        if not g.may_use_chunk(c.content_hash):
            raise _chunk_missing(c.content_hash, i)
    for cid in body.cartridges:
        if not g.may_use_cartridge(cid):
            raise InferenceError(404, "cartridge_not_found", f"unknown cartridge {cid}")


def _chunk_missing(h: str, i: int) -> InferenceError:
    return InferenceError(404, "chunk_not_found", f"no stored KV for content_hash {h} (chunks.{i})")


def _check_chunk_text(eng: Engine, text: str, i: int, limit: int) -> None:
    if not text:
        raise InferenceError(422, "validation_error", f"texts.{i}: empty text")
    n = int(eng.chunk_ids(text).numel())
    if n > limit:
        raise InferenceError(400, "chunk_too_long", f"chunk {i} has {n} tokens; the limit is {limit}")


def _chunk_ids(eng: Engine, store: ChunkStore, c: ChunkIn, i: int, limit: int) -> ChunkKV:
    """A stored chunk (ids + KV) for a known hash; ids only (kv None) for a text not stored yet."""
    if c.content_hash is not None and (c.text is None or store.has(c.content_hash)):
        try:
            return store.get(c.content_hash)
        except ChunkNotFound:
            raise _chunk_missing(c.content_hash, i) from None
    try:
        return store.get(content_hash(c.text))
    except ChunkNotFound:
        pass
    _check_chunk_text(eng, c.text, i, limit)
    return ChunkKV(token_ids=eng.chunk_ids(c.text), kv=None)


def _resolve(resolver: CartridgeResolver, ids: list[str]) -> PrefixKV | None:
    if not ids:
        return None
    try:
        return resolver(ids)
    except (CartridgeNotFound, KeyError) as e:
        missing = e.args[0] if e.args else "?"
        raise InferenceError(404, "cartridge_not_found", f"unknown cartridge {missing}") from None
    except ValueError as e:  # trained for another model, or cartridges that do not compose
        raise InferenceError(409, "cartridge_incompatible", str(e)) from None
