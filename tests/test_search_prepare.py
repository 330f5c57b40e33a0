"""One `prepare` step for /v1/search and /v1/context (app/search/prepare.py): the instruction is
read once per request, by the rules or (switched on) by the LLM, and both endpoints rank with
what it returns."""

from __future__ import annotations

from tests.test_search_ranking import _turn


def _seed(client, actor) -> list[str]:
    items = [
        {"kind": "feedback", "content": "deploys need two approvals", "labels": ["ops"]},
        {"kind": "note", "content": "the deploy on friday went fine"},
        _turn("Caroline: the deploy checklist is in the wiki", "s1", 0),
    ]
    return client.post("/v1/episodes/batch", json={"items": items}, headers=actor.h).json()["ids"]


def test_the_instruction_is_read_once_per_request(client, world, monkeypatch):
    """Search and context each read an instruction exactly once (the service ranks with the
    prepared request and never reads it again)."""
    from app.search import instruction

    alice = world.user(world.org())
    _seed(client, alice)
    calls, real = [], instruction.interpret

    def counted(text, **kw):
        calls.append(text)
        return real(text, **kw)

    monkeypatch.setattr(instruction, "interpret", counted)
    r = client.post("/v1/search", json={"query": "deploy", "instruction": "only notes"}, headers=alice.h)
    assert r.status_code == 200 and r.json()["interpreted"]["filters"] == {"kinds": ["note"]}
    assert calls == ["only notes"]
    r = client.post("/v1/context", json={"query": "deploy", "instruction": "only notes"}, headers=alice.h)
    assert r.status_code == 200 and r.json()["interpreted"]["filters"] == {"kinds": ["note"]}
    assert calls == ["only notes", "only notes"]
    assert all(i["kind"] == "note" for s in r.json()["sections"] for i in s["items"] if i["type"] == "episode")


def test_the_llm_reads_the_instruction_when_switched_on(client, world, app, swap_state):
    """With `instruction_llm` on, prepare asks the configured gateway (a scripted one here) for
    the fields the rules left unset, for search and context alike."""
    from app.llm.fake import FakeGateway

    alice = world.user(world.org())
    _seed(client, alice)
    swap_state(app.state, "settings", app.state.settings.model_copy(update={"instruction_llm": True}))
    gw = FakeGateway(rules={"vendor rules": '{"labels": ["ops"]}'})
    swap_state(app.state.resources, "_gateway", gw)
    for path in ("/v1/search", "/v1/context"):
        r = client.post(path, json={"query": "deploy", "instruction": "vendor rules"}, headers=alice.h)
        assert r.status_code == 200, r.text
        assert r.json()["interpreted"]["filters"].get("labels") == ["ops"], (path, r.json()["interpreted"])
