"""A distill job prepares each episode once (one injection screen of its text, one search for its
lesson-bearing sentences, read by the judge and the extractor alike) and keeps episode ids as
UUIDs until they are written into JSON."""

from __future__ import annotations

import json
import uuid

from sqlalchemy import text

from app.llm.fake import FakeGateway

CONTENT = "Heads up: always run the database migrations before you deploy to staging."
OUTCOME = "success"


def _fake() -> FakeGateway:
    return FakeGateway(default=json.dumps({"score": 0.9, "useful": 1, "suspicious": 0, "reason": "ok"}))


def _post(client, actor, content: str, **kw) -> str:
    r = client.post("/v1/episodes", json={"kind": "conversation", "content": content, **kw}, headers=actor.h)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_each_episode_is_screened_and_searched_for_lessons_once(client, world, run_job, monkeypatch):
    from pipelines.distillation import lessons, prompts

    alice = world.user(world.org())
    _post(client, alice, CONTENT, outcome=OUTCOME)
    screened: list[str] = []
    searched: list[str] = []
    real_screen, real_candidates = prompts.screen_injection, lessons.candidates

    def screen(t: str) -> list[str]:
        if t.endswith(f"\n{OUTCOME}"):  # the episode's whole text (sentences and statements are screened apart)
            screened.append(t)
        return real_screen(t)

    def candidates(content: str, **kw) -> list:
        searched.append(content)
        return real_candidates(content, **kw)

    monkeypatch.setattr(prompts, "screen_injection", screen)
    monkeypatch.setattr(lessons, "candidates", candidates)
    job = run_job(alice.org_id, "distill", {"min_age_s": 0}, gateway=_fake())
    assert job.status == "succeeded", job.error
    assert job.stats["kept"] == 1 and job.stats["memories_created"] == 1, job.stats
    assert screened == [f"{CONTENT}\n{OUTCOME}"]
    assert searched == [CONTENT]


def test_episode_ids_stay_uuids_until_the_json(client, world, run_job, admin_engine, monkeypatch):
    from pipelines.distillation import job as distill

    alice = world.user(world.org())
    episode_id = uuid.UUID(_post(client, alice, CONTENT, outcome=OUTCOME))
    ids: list = []
    found: list = []
    real_judge, real_extract = distill.judge, distill.extract

    def judge(gateway, episodes, **kw):
        ids.extend(e.id for e in episodes)
        verdicts = real_judge(gateway, episodes, **kw)
        ids.extend(v.id for v in verdicts)
        return verdicts

    def extract(gateway, episodes, **kw):
        ids.extend(e.id for e in episodes)
        out = real_extract(gateway, episodes, **kw)
        found.extend(out)
        return out

    monkeypatch.setattr(distill, "judge", judge)
    monkeypatch.setattr(distill, "extract", extract)
    job = run_job(alice.org_id, "distill", {"min_age_s": 0}, gateway=_fake())
    assert job.status == "succeeded", job.error
    assert ids == [episode_id] * 3
    assert len(found) == 1
    assert found[0].source_ids == [episode_id] and list(found[0].turns) == [episode_id]
    with admin_engine.connect() as c:
        provenance = c.execute(text("SELECT provenance FROM memories WHERE org_id = :o"), {"o": alice.org_id}).scalar()
    assert provenance["sources"] == [{"type": "episode", "id": str(episode_id), "turns": [0]}]
