"""Fairness between the tier's callers (issue 41, M4): a second org is served while a first org's
long generation runs, bounds and rates answer 429, and a handoff token's signed caps hold.
Real SmolLM2 weights, CPU; ordering and progress are asserted, never timings."""

from __future__ import annotations

import base64
import json
import threading
from types import SimpleNamespace

from fastapi.testclient import TestClient

from app.inference.scheduler import FairScheduler, Limits, SchedulerConfig
from app.inference.server import ServerConfig, create_app
from app.kit.runtime.signing import sign, verify

KEY = b"test-operator-key"
OPERATOR = {"Authorization": f"Bearer {KEY.decode()}"}
LONG = " ".join(f"Stone {i} is small, blue and round." for i in range(100))  # ~900 tokens
NO_RATE = dict(requests_per_minute_token=0, requests_per_minute_org=0)


def _bearer(org: str, sub: str = "u", **caps) -> dict:
    return {"Authorization": f"Bearer {sign(KEY, org=org, sub=sub, chunks=[], cartridges=[], ttl_s=60, **caps)}"}


def _app(engine, store, tmp_path, **server):
    return create_app(ServerConfig(engine=engine.config, store_root=tmp_path, **server), engine=engine, store=store, key=KEY)


def _error(resp, status: int, code: str) -> None:
    assert resp.status_code == status, resp.text
    assert resp.json() == {"error": {"code": code, "message": resp.json()["error"]["message"]}}
    assert resp.json()["error"]["message"]


class _Started:
    """Set once the model runs its first forward pass (a hook on the real model, not a mock)."""

    def __init__(self, model):
        self.event = threading.Event()
        self._h = model.register_forward_pre_hook(lambda *_: self.event.set())

    def wait(self) -> None:
        assert self.event.wait(120), "the first request never reached the model"
        self._h.remove()


def _in_thread(fn, done: list, name: str) -> threading.Thread:
    def run():
        done.append((name, fn()))

    t = threading.Thread(target=run)
    t.start()
    return t


def test_a_second_org_is_served_while_the_first_generates(engine, store):
    """Before: one global lock for the whole request, so org b's 2-token answer waited for all of
    org a's long prompt and generation (the issue: 101 s behind a 67.6 s request)."""
    long_body = {"prompt": LONG + " Which stone is red?", "max_tokens": 16, "mode": "full"}
    with TestClient(create_app(engine=engine, store=store, key=KEY), raise_server_exceptions=False) as c:
        done: list = []
        started = _Started(engine.model)
        a = _in_thread(lambda: c.post("/v1/generate", json=long_body, headers=_bearer("org-a")), done, "a")
        started.wait()  # org a holds the engine now
        b = _in_thread(
            lambda: c.post("/v1/generate", json={"prompt": "Say hi.", "max_tokens": 2}, headers=_bearer("org-b")), done, "b"
        )
        a.join(), b.join()
        assert [r.status_code for _, r in done] == [200, 200], [r.text for _, r in done]
        assert [name for name, _ in done] == ["b", "a"]  # b finished while a was still generating
        # Pausing a between layers changed nothing in its answer.
        alone = engine.generate(long_body["prompt"], mode="full", max_tokens=16)
        assert dict(done)["a"].json()["text"] == alone.text


def test_beyond_the_token_and_org_bounds_is_429(engine, store, tmp_path):
    tenant = Limits(active_per_token=1, queued_per_token=1, active_per_org=2, queued_per_org=0, **NO_RATE)
    with TestClient(_app(engine, store, tmp_path, schedule=SchedulerConfig(tenant=tenant)), raise_server_exceptions=False) as c:
        state, done = c.app.state, []
        started = _Started(engine.model)
        first = _bearer("org-a", "u1")
        long_body = {"prompt": LONG, "max_tokens": 4, "mode": "full"}
        a1 = _in_thread(lambda: c.post("/v1/generate", json=long_body, headers=first), done, "a1")
        started.wait()
        a2 = _in_thread(lambda: c.post("/v1/generate", json={"prompt": "Hi.", "max_tokens": 1}, headers=first), done, "a2")
        while state.scheduler.stats()["in_flight"] < 2:  # a2 admitted: it waits behind a1 (same token)
            threading.Event().wait(0.01)
        small = {"prompt": "Hi.", "max_tokens": 1}
        over_token = c.post("/v1/generate", json=small, headers=first)  # a third of the token's: over 1 + 1
        over_org = c.post("/v1/generate", json=small, headers=_bearer("org-a", "u2"))  # org a: 2 + 0 in flight
        other_org = c.post("/v1/generate", json=small, headers=_bearer("org-b"))
        a1.join(), a2.join()
        for r in (over_token, over_org):
            _error(r, 429, "rate_limited")
            assert int(r.headers["retry-after"]) >= 1
        assert "token" in over_token.json()["error"]["message"]
        assert "organisation" in over_org.json()["error"]["message"]
        assert other_org.status_code == 200, other_org.text
        assert sorted(n for n, r in done if r.status_code == 200) == ["a1", "a2"]
        assert state.scheduler.stats() == {"in_flight": 0, "active": 0, "waiting": 0, "holder": None}
        # the bounds counted requests in flight, not requests ever made: free again
        assert c.post("/v1/generate", json=small, headers=_bearer("org-a", "u2")).status_code == 200


def test_the_operator_has_bounds_too_but_an_erasure_is_never_refused(engine, store, tmp_path):
    one = Limits(active_per_token=1, queued_per_token=0, active_per_org=1, queued_per_org=0, **NO_RATE)
    with TestClient(
        _app(engine, store, tmp_path, schedule=SchedulerConfig(operator=one)), raise_server_exceptions=False, headers=OPERATOR
    ) as c:
        h = c.post("/v1/chunks", json={"texts": ["Plimton is the capital of Zorbia."]}).json()["content_hashes"][0]
        done: list = []
        started = _Started(engine.model)
        long_run = _in_thread(
            lambda: c.post("/v1/generate", json={"prompt": LONG, "max_tokens": 2, "mode": "full"}), done, "long"
        )
        started.wait()
        _error(c.post("/v1/generate", json={"prompt": "Hi.", "max_tokens": 1}), 429, "rate_limited")
        assert c.delete(f"/v1/chunks/{h}").json() == {"deleted": True}  # waits its turn, is not refused
        long_run.join()
        assert done[0][1].status_code == 200 and not store.has(h)


def test_a_token_over_its_rate_is_429_and_the_operator_is_not_limited(engine, store, tmp_path):
    tenant = Limits(requests_per_minute_token=1, requests_per_minute_org=600)
    with TestClient(_app(engine, store, tmp_path, schedule=SchedulerConfig(tenant=tenant)), raise_server_exceptions=False) as c:
        body, mine = {"prompt": "Hi.", "max_tokens": 1}, _bearer("org-a", "u1")
        assert c.post("/v1/generate", json=body, headers=mine).status_code == 200
        again = c.post("/v1/generate", json=body, headers=mine)
        _error(again, 429, "rate_limited")
        assert int(again.headers["retry-after"]) >= 1
        assert c.post("/v1/generate", json=body, headers=_bearer("org-a", "u2")).status_code == 200
        assert all(c.post("/v1/generate", json=body, headers=OPERATOR).status_code == 200 for _ in range(3))


def test_a_handoff_tokens_signed_caps_hold(engine, store, tmp_path):
    short = "Where is Plimton?"
    n_short = int(engine.system_ids.numel() + engine.query_ids(short).numel())
    capped = _bearer("org-a", max_prompt_tokens=n_short, max_new_tokens=4)
    with TestClient(_app(engine, store, tmp_path), raise_server_exceptions=False) as c:
        assert c.post("/v1/generate", json={"prompt": short, "max_tokens": 4}, headers=capped).status_code == 200
        longer = c.post("/v1/generate", json={"prompt": short + " Answer in one word.", "max_tokens": 4}, headers=capped)
        _error(longer, 400, "prompt_too_long")
        assert str(n_short) in longer.json()["error"]["message"]
        _error(c.post("/v1/generate", json={"prompt": short, "max_tokens": 5}, headers=capped), 400, "max_tokens_too_large")
        # The client cannot raise a cap: not through the body ...
        _error(
            c.post(
                "/v1/generate",
                json={"prompt": short + " Answer in one word.", "max_tokens": 4, "max_prompt_tokens": 100_000},
                headers=capped,
            ),
            422,
            "validation_error",
        )
        # ... nor by rewriting the token's claims (the signature no longer matches).
        pre, grant, mac = capped["Authorization"].split()[1].split(".")
        claims = json.loads(base64.urlsafe_b64decode(grant + "=" * (-len(grant) % 4)))
        claims["max_prompt_tokens"] = 100_000
        raised = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
        _error(
            c.post(
                "/v1/generate",
                json={"prompt": short + " Answer in one word.", "max_tokens": 4},
                headers={"Authorization": f"Bearer {pre}.{raised}.{mac}"},
            ),
            401,
            "unauthorized",
        )


def test_the_tiers_own_cap_holds_for_a_token_without_one_but_not_the_operator(engine, store, tmp_path):
    with TestClient(
        _app(engine, store, tmp_path, handoff_max_prompt_tokens=200, handoff_max_new_tokens=8), raise_server_exceptions=False
    ) as c:
        body = {"prompt": LONG, "max_tokens": 1}
        _error(c.post("/v1/generate", json=body, headers=_bearer("org-a")), 400, "prompt_too_long")
        # a token's own cap never raises the tier's
        _error(c.post("/v1/generate", json=body, headers=_bearer("org-a", max_prompt_tokens=10_000)), 400, "prompt_too_long")
        _error(
            c.post("/v1/generate", json={"prompt": "Hi.", "max_tokens": 9}, headers=_bearer("org-a")), 400, "max_tokens_too_large"
        )
        assert c.post("/v1/generate", json=body, headers=OPERATOR).status_code == 200


def test_the_service_signs_the_org_and_the_caps_into_a_handoff():
    from app.context.handoff import sign as sign_handoff

    settings = SimpleNamespace(
        inference_secret=lambda: KEY, handoff_ttl_s=60, handoff_max_prompt_tokens=1234, handoff_max_new_tokens=56
    )
    principal = SimpleNamespace(org_id="5d0c8e1e-0000-4000-8000-000000000001", user_id="u-1")
    out = sign_handoff(settings, principal, {"chunks": [{"content_hash": "a" * 64}], "cartridges": []})
    g = verify(KEY, out["token"])
    assert (g.org, g.sub, g.max_prompt_tokens, g.max_new_tokens) == (principal.org_id, "u-1", 1234, 56)
    assert g.chunks == {"a" * 64} and not g.operator and g.token_id != "operator"
    assert (out["max_prompt_tokens"], out["max_new_tokens"]) == (1234, 56)  # the client is told its caps


def test_the_scheduler_alternates_orgs_not_requests():
    """Org a floods with two requests, org b sends one: b's steps alternate with a's as a whole,
    not with each of a's requests (measured engine time, a manual clock: deterministic)."""
    now = [0.0]
    sched = FairScheduler(SchedulerConfig(tenant=Limits(**NO_RATE), quantum_s=0.5), clock=lambda: now[0])
    log: list[str] = []
    gate = sched.admit("", "", operator=True)

    def work(name: str, org: str, steps: int) -> threading.Thread:
        ticket = sched.admit(org, name)

        def run():
            with sched.turn(ticket):
                for _ in range(steps):
                    log.append(name)
                    now[0] += 1.0  # one step of engine time
                    sched.checkpoint()

        t = threading.Thread(target=run)
        t.start()
        return t

    with sched.turn(gate):  # everyone queues behind the operator's turn
        threads = [work("a1", "a", 6), work("a2", "a", 6), work("b", "b", 3)]
        while sched.stats()["waiting"] < 3:
            threading.Event().wait(0.01)
    for t in threads:
        t.join()
    assert sorted(log) == ["a1"] * 6 + ["a2"] * 6 + ["b"] * 3
    # b gets every other step until done; a's two requests share a's half
    assert [i for i, n in enumerate(log) if n == "b"] in ([0, 2, 4], [1, 3, 5])
    assert {n for n in log[:6] if n != "b"} == {"a1", "a2"}
    assert sched.stats() == {"in_flight": 0, "active": 0, "waiting": 0, "holder": None}


def test_long_segments_are_prefilled_in_pieces_with_the_same_result(engine):
    import dataclasses

    import torch

    pieces = type(engine)(dataclasses.replace(engine.config, prefill_chunk_tokens=64), engine.model, engine.tokenizer)
    one = engine.generate(LONG[:1500], mode="full", max_tokens=3)
    many = pieces.generate(LONG[:1500], mode="full", max_tokens=3)
    assert torch.allclose(one.first_logits, many.first_logits, atol=1e-3)
    assert one.token_ids == many.token_ids
