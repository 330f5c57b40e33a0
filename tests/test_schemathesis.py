"""Schemathesis against the served `/openapi.json` (issue 9, item 2).

The real app (its own instance, same settings and embedder as the rest of the suite) is served by
uvicorn on a free 127.0.0.1 port; schemathesis fuzzes its OpenAPI document (checked equal to the
served `/openapi.json`) and sends every generated request over loopback with the Bearer key of a
user who holds every role (so authorisation does not hide the handlers behind 403s). Each
response must:

- never be a 5xx (`not_a_server_error`);
- match the documented status codes, content types, headers and response schema, accept
  schema-valid input and refuse schema-invalid input (schemathesis' default checks, including
  `positive_data_acceptance` and `negative_data_rejection`);
- for every 4xx/5xx, carry the the REST contract error shape `{"error": {"code": str, "message": str}}` with
  a snake_case code (`error_shape`); for a 405, name exactly the path's methods in `Allow`
  (`allow_header`).

Bounded: `MAX_EXAMPLES` generated cases per operation in the fuzzing phase, plus the examples and
coverage phases: about 1,800 requests and 50 s of CPU (≤ 90 s wall on an idle 2-core machine).

No operation is excluded. Rules JSON Schema cannot state are handled in the open:
`DELETE /v1/users/{user_id}/data` runs as a fresh admin per case (forgetting oneself revokes the
key); `POST /v1/sessions` bodies that may exceed the token budget are held to that rule instead of
`positive_data_acceptance`; U+0000 is not generated but sent explicitly by
`test_nul_characters_are_refused_not_500`.
"""

from __future__ import annotations

import collections
import re
import socket
import threading
import time
import uuid

import pytest
import schemathesis

MAX_EXAMPLES = 5
SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")
FORGET_PATH = "/v1/users/{user_id}/data"
# operation -> Counter of response statuses, plus seconds spent (printed at the end of the module, -s).
STATS: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
ALL_ROLES = ["member", "steward", "auditor", "admin"]
BATCH_MARKER = "valid item of a batch refused for a NUL in another item"


def _serve(app):
    """Start uvicorn on a free loopback port in a thread; return (base_url, stop)."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 60
    while not server.started:
        if not thread.is_alive() or time.time() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=30)

    return f"http://127.0.0.1:{port}", stop


@pytest.fixture(scope="module")
def live_base_url(settings, embedder):
    from app.main import create_app

    base, stop = _serve(create_app(settings, embedder=embedder))
    try:
        yield base
    finally:
        stop()
        if STATS:
            total = sum(sum(v for k, v in c.items() if isinstance(k, int)) for c in STATS.values())
            print(f"\nschemathesis: {total} requests over {len(STATS)} operations")
            for label, c in sorted(STATS.items()):
                codes = " ".join(f"{k}x{v}" for k, v in sorted((k, v) for k, v in c.items() if isinstance(k, int)))
                print(f"  {label:45s} {c['seconds'] / 1000:6.1f}s  {codes}")


@pytest.fixture(scope="module")
def fuzz_actor(admin_engine):
    from tests.conftest import World

    w = World(admin_engine)
    org = w.org()
    return w, w.user(org, roles=ALL_ROLES, groups=["finance", "eng"], clearances=["pii", "secret"])


def _openapi_document() -> dict:
    """The document `/openapi.json` serves, built without a database (no lifespan runs).

    Loaded at collection time so that each operation is its own pytest item (schemathesis'
    `from_fixture` loader relies on `Node._nodeid`, which pytest 9.2 no longer has);
    `test_fuzzed_schema_is_the_served_one` checks it equals what the server returns.
    """
    from app.config import Settings
    from app.main import create_app

    return create_app(Settings(database_url="postgresql://unused@127.0.0.1/unused")).openapi()


OPENAPI = _openapi_document()
schema = schemathesis.openapi.from_dict(OPENAPI)
# allow_x00=False: PostgreSQL text/jsonb cannot hold U+0000, so the API refuses it with 422 — a rule
# no JSON Schema string states. `test_nul_characters_are_refused_not_500` covers it explicitly.
schema.config.generation.update(max_examples=MAX_EXAMPLES, deterministic=True, database="none", allow_x00=False)
# The stateful phase needs OpenAPI links, which this schema does not declare.
schema.config.phases.update(phases=["examples", "coverage", "fuzzing"])


def _session_may_exceed_budget(case) -> bool:
    """POST /v1/sessions has one rule JSON Schema cannot state: the working context may take at most
    half of `budget_tokens` in model tokens (422 `working_context_too_large` otherwise). True when a
    schema-valid body might break it; the bound is conservative (a byte-level BPE token covers at
    least one byte of the rendered context)."""
    import jsonschema_rs

    body = case.body
    if case.operation.label != "POST /v1/sessions" or not isinstance(body, dict):
        return False
    if not jsonschema_rs.validator_for(OPENAPI["components"]["schemas"]["SessionIn"]).is_valid(body):
        return False  # schema-invalid (negative) data: every check applies
    blocks, budget = body.get("working_context", {}), body.get("budget_tokens", 4000)
    from app.context.assemble import Piece, render

    rendered = render([Piece("working_context", "block", k, f"{k}: {v}") for k, v in blocks.items()])
    return len(rendered.encode()) > budget // 2


def error_shape(ctx, response, case) -> None:
    """the REST contract: every error is `{"error": {"code": "<snake_case>", "message": "<text>"}}`."""
    if response.status_code < 400:
        return
    try:
        body = response.json()
    except Exception as exc:
        raise AssertionError(f"{response.status_code} body is not JSON: {response.content[:200]!r}") from exc
    err = body.get("error") if isinstance(body, dict) else None
    if not (isinstance(err, dict) and isinstance(err.get("code"), str) and isinstance(err.get("message"), str)):
        raise AssertionError(f"{response.status_code} body is not in the error shape: {body!r}"[:500])
    if not SNAKE.match(err["code"]):
        raise AssertionError(f"error code {err['code']!r} is not snake_case")


def allow_header(ctx, response, case) -> None:
    """A 405 names, in `Allow`, exactly the methods the document lists for the path (RFC 9110)."""
    if response.status_code != 405:
        return
    documented = {m.upper() for m in OPENAPI["paths"][case.operation.path] if m != "parameters"}
    allow = {m.strip().upper() for m in (response.headers.get("allow") or [""])[0].split(",") if m.strip()}
    if allow != documented:
        raise AssertionError(f"405 Allow {sorted(allow)} != documented {sorted(documented)}")


@schema.parametrize()
def test_openapi_conformance(case, fuzz_actor, live_base_url):
    world, actor = fuzz_actor
    if case.path == FORGET_PATH:
        # A fresh admin (own org) per case: forgetting itself only revokes its own key.
        actor = world.user(world.org(f"forget-{uuid.uuid4().hex[:8]}"), roles=["admin"])
    headers = {"Authorization": f"Bearer {actor.key}"}
    started = time.perf_counter()
    try:
        response = _call_and_check(case, live_base_url, headers)
    finally:
        STATS[case.operation.label]["seconds"] += int((time.perf_counter() - started) * 1000)
    STATS[case.operation.label][response.status_code] += 1


def _call_and_check(case, live_base_url: str, headers: dict):
    if _session_may_exceed_budget(case):
        # Every check but `positive_data_acceptance`, and the rule itself: created, or refused for it.
        from schemathesis.specs.openapi.checks import positive_data_acceptance

        response = case.call(base_url=live_base_url, headers=headers, timeout=60)
        case.validate_response(
            response, headers=headers, additional_checks=[error_shape, allow_header], excluded_checks=[positive_data_acceptance]
        )
        assert response.status_code == 201 or (
            response.status_code == 422 and response.json()["error"]["code"] == "working_context_too_large"
        ), response.text
        return response
    return case.call_and_validate(
        base_url=live_base_url, headers=headers, additional_checks=[error_shape, allow_header], timeout=60
    )


def test_fuzzed_schema_is_the_served_one(live_base_url):
    """The document schemathesis fuzzes is the one served, and it names the the REST contract endpoints."""
    import httpx

    doc = httpx.get(f"{live_base_url}/openapi.json", timeout=30).json()
    assert doc == OPENAPI
    paths = doc["paths"]
    for path, method in [
        ("/v1/episodes", "post"),
        ("/v1/episodes/batch", "post"),
        ("/v1/episodes/{episode_id}", "get"),
        ("/v1/memories", "post"),
        ("/v1/memories/{memory_id}", "patch"),
        ("/v1/search", "post"),
        ("/v1/context", "post"),
        ("/v1/sessions", "post"),
        ("/v1/jobs", "post"),
        ("/v1/jobs/{job_id}", "get"),
        ("/v1/audit", "get"),
        ("/healthz", "get"),
        ("/readyz", "get"),
    ]:
        assert method in paths.get(path, {}), f"{method.upper()} {path} missing from /openapi.json"


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("POST", "/v1/episodes", {"kind": "note", "content": "nul \x00 in content"}),
        ("POST", "/v1/episodes", {"kind": "note", "content": "ok", "metadata": {"k\x00": "v"}}),
        ("POST", "/v1/episodes", {"kind": "note", "content": "ok", "messages": [{"role": "user", "content": "a\x00b"}]}),
        (
            "POST",
            "/v1/episodes/batch",
            {"items": [{"kind": "note", "content": BATCH_MARKER}, {"kind": "note", "content": "\x00"}]},
        ),
        ("POST", "/v1/memories", {"kind": "fact", "text": "nul \x00 in text"}),
        ("POST", "/v1/search", {"query": "nul \x00 query"}),
        ("POST", "/v1/context", {"query": "nul \x00 query"}),
        ("GET", "/v1/audit?action=a%00b", None),
    ],
)
def test_nul_characters_are_refused_not_500(client, fuzz_actor, admin_engine, method, path, body):
    """U+0000 anywhere in a request is bad input (422/400 in the error shape), never a 500, and a
    refused batch writes nothing (not even its valid items)."""
    from sqlalchemy import text

    _, actor = fuzz_actor
    r = client.request(method, path, json=body, headers=actor.h)
    assert r.status_code in (400, 422), (r.status_code, r.text)
    err = r.json()["error"]
    assert SNAKE.match(err["code"]) and err["message"]
    with admin_engine.connect() as c:
        assert (
            c.execute(
                text("SELECT count(*) FROM episodes WHERE org_id = :o AND content = :m"), {"o": actor.org_id, "m": BATCH_MARKER}
            ).scalar()
            == 0
        )
