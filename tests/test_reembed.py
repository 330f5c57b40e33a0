"""Vector identity per org and online re-embedding (app/embedders/): the model recorded, the
start-up refusal, GET /v1/orgs/current/embedder, a MiniLM -> e5 run that switches atomically with
writes and an erasure during it, the writer's check after a switch, who may start one."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.embedders import repository as repo
from app.embedders import service
from app.kit.tenancy.view import EVERY_BRANCH

MINI, E5 = "local/all-minilm-l6-v2", "local/e5-small"
WORDS = "deploy cache cold kafka lag invoice finance billing oncall vendor rollback canary".split()


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=6)) + f" case {i}" for i in range(n)]


def populate(client, admin, *, episodes: int = 12) -> dict:
    """Episodes (one in a branch), memory versions (one in a branch) and return what was written."""
    h = admin.h
    items = [{"kind": "note", "content": t, "visibility": "org"} for t in sentences(episodes)]
    items.append({"kind": "note", "content": "the kafka consumer lag paged the oncall engineer", "visibility": "org"})
    r = client.post("/v1/episodes/batch", json={"items": items}, headers=h)
    assert r.status_code == 201, r.text
    m = client.post("/v1/memories", json={"text": "invoices are sent by the finance team", "kind": "fact"}, headers=h)
    assert m.status_code == 201, m.text
    p = client.patch(f"/v1/memories/{m.json()['id']}", json={"text": "invoices are sent by finance on the first"}, headers=h)
    assert p.status_code == 200, p.text
    assert client.post("/v1/branches", json={"name": "exp"}, headers=h).status_code == 201
    bh = {**h, "Memscale-Branch": "exp"}
    assert (
        client.post("/v1/episodes", json={"kind": "note", "content": "canary rollback in the branch"}, headers=bh).status_code
        == 201
    )
    assert client.post("/v1/memories", json={"text": "branch rule: canary first", "kind": "rule"}, headers=bh).status_code == 201
    return {"memory": m.json()["id"]}


def stored(engine, org_id) -> dict[tuple[str, str], tuple[str, np.ndarray]]:
    """{(item type, key): (text, vector)} of every stored vector of the org, every branch and
    version, read in one snapshot (a switch committed between two tables' reads is not a mix)."""
    with Session(engine.execution_options(isolation_level="REPEATABLE READ")) as db:
        return {
            (item, k): (t, np.asarray(v, dtype=np.float32))
            for item in repo.ITEMS
            for k, t, v in repo.vectors_of(db, org_id, item)
        }


class Models:
    """Which model made a stored vector: each text embedded once by both."""

    def __init__(self, mini, e5):
        self.by = {MINI: mini, E5: e5}
        self.cache: dict[tuple[str, str], np.ndarray] = {}

    def vec(self, model: str, text: str) -> np.ndarray:
        if (model, text) not in self.cache:
            self.cache[(model, text)] = self.by[model].embed([text])[0]
        return self.cache[(model, text)]

    def warm(self, texts) -> None:
        texts = list(texts)
        for model, e in self.by.items():
            todo = [t for t in dict.fromkeys(texts) if (model, t) not in self.cache]
            for t, v in zip(todo, e.embed(todo) if todo else []):
                self.cache[(model, t)] = v

    def of(self, text: str, v: np.ndarray) -> str:
        for model in self.by:
            if float(np.dot(self.vec(model, text), v)) > 0.999:
                return model
        return "neither"

    def models(self, rows) -> set[str]:
        return {self.of(t, v) for t, v in rows.values()}


def bound(app, org_id):
    """A transaction of the service role that sees every scope and branch of the org (as a job)."""
    from app.kit.database.db import bind_principal

    db = app.state.sessions()
    bind_principal(db, None, org_id=org_id, all_scopes=True, view=EVERY_BRANCH)
    return db


@pytest.fixture(scope="module")
def e5():
    from app.kit.runtime.embedding import E5Embedder

    return E5Embedder()


@pytest.fixture
def models(embedder, e5):
    return Models(embedder, e5)


def _ids(client, h, query: str, types=("memory", "episode", "chunk")) -> list[str]:
    r = client.post("/v1/search", json={"query": query, "k": 5, "types": list(types)}, headers=h)
    assert r.status_code == 200, r.text
    return [x["id"] for x in r.json()["results"]]


def _back_to_minilm(run_job, org_id) -> None:
    """Later apps of this test database start only when every org holds the configured model."""
    job = run_job(org_id, "reembed", {"model": MINI})
    assert job.status == "succeeded", job.error


def test_a_new_org_records_the_model_and_its_run_is_its_own(client, world, app):
    org, other = world.org(), world.org()
    a, b = world.user(org), world.user(other)
    assert client.get("/v1/orgs/current/embedder", headers=a.h).json() == {"model": MINI, "dimensions": 384}
    with bound(app, a.org_id) as db:
        assert service.begin(db, a.org_id, E5, 384, None) is True
        db.commit()
    try:
        mine = client.get("/v1/orgs/current/embedder", headers=a.h).json()
        assert mine["model"] == MINI and mine["reembedding"]["model"] == E5
        assert mine["reembedding"]["done"] == 0 and "started_at" in mine["reembedding"]
        assert client.get("/v1/orgs/current/embedder", headers=b.h).json() == {"model": MINI, "dimensions": 384}
    finally:
        with bound(app, a.org_id) as db:
            service.abandon(db, a.org_id)
            db.commit()


def test_start_is_refused_over_an_org_of_another_model(settings, world, app):
    from app.embedders.service import EmbedderMismatch
    from app.main import create_app

    org = world.org()
    org_id = world.orgs[org]
    e5_settings = settings.model_copy(update={"embedding_model": E5})
    with pytest.raises(EmbedderMismatch) as refused:
        with TestClient(create_app(e5_settings, embedder=object())):
            pass
    assert f"memscale admin reembed --org {org} --model {E5}" in str(refused.value)
    # A re-embedding to the configured model under way: that org is served (its old model until the switch).
    with bound(app, org_id) as db:
        service.begin(db, org_id, E5, 384, None)
        db.commit()
    try:
        with pytest.raises(EmbedderMismatch) as still:  # the other orgs of this database still hold MiniLM
            with TestClient(create_app(e5_settings, embedder=object())):
                pass
        assert f"--org {org} " not in str(still.value)
    finally:
        with bound(app, org_id) as db:
            service.abandon(db, org_id)
            db.commit()


def test_a_cli_command_that_writes_refuses_too(settings, world, tmp_path):
    org = world.org()
    world.user(org, "ann")
    lines = tmp_path / "eps.jsonl"
    lines.write_text('{"kind": "note", "content": "hello"}\n')
    env = {**os.environ, "MEMSCALE_DATABASE_URL": settings.database_url, "MEMSCALE_EMBEDDING_MODEL": E5}
    r = subprocess.run(
        [sys.executable, "-m", "app", "admin", "import", str(lines), "--org", org, "--user", "ann"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert f"memscale admin reembed --org {org} --model {E5}" in r.stderr


def test_reembed_switches_atomically_with_writes_and_an_erasure(client, world, app, run_job, admin_engine, models, tmp_path):
    org = world.org()
    admin = world.user(org, roles=["admin"])
    populate(client, admin)
    (tmp_path / "doc.md").write_text("# Billing\n\nInvoices are generated on the first and sent by the finance team.")
    boot = run_job(admin.org_id, "bootstrap", {"path": str(tmp_path), "visibility": "org", "enrich": False})
    assert boot.status == "succeeded", boot.error
    rows = stored(admin_engine, admin.org_id)
    assert {item for item, _ in rows} == set(repo.ITEMS)  # a vector in every table
    models.warm(t for t, _ in rows.values())
    assert models.models(rows) == {MINI}
    queries = ["who pages the oncall engineer for kafka lag", "when are invoices sent"]
    before = {q: _ids(client, admin.h, q) for q in queries}

    # Stage every vector, but do not switch yet: search still ranks MiniLM vectors with a MiniLM query.
    with bound(app, admin.org_id) as db:
        service.begin(db, admin.org_id, E5, 384, None)
        db.commit()
    cursor: dict = {}
    while cursor.get("item") != "end":
        with bound(app, admin.org_id) as db:
            service.stage_batch(db, admin.org_id, models.by[E5], cursor, limit=16)
            db.commit()
    run = client.get("/v1/orgs/current/embedder", headers=admin.h).json()
    assert run["model"] == MINI and run["reembedding"]["done"] == run["reembedding"]["total"] == len(rows)
    assert {q: _ids(client, admin.h, q) for q in queries} == before
    assert models.models(stored(admin_engine, admin.org_id)) == {MINI}

    # Writes and an erasure during the run.
    new = client.post(
        "/v1/episodes", json={"kind": "note", "content": "written during the run", "visibility": "org"}, headers=admin.h
    )
    assert new.status_code == 201
    gone = _ids(client, admin.h, queries[0], types=("episode",))[0]
    assert client.delete(f"/v1/episodes/{gone}", headers=admin.h).status_code == 202
    with Session(admin_engine) as db:
        assert db.query(repo.StagedVector).filter_by(org_id=admin.org_id, episode_id=gone).count() == 0

    job = run_job(admin.org_id, "reembed", {"model": E5}, created_by=admin.user_id)  # resumes the run and switches
    assert job.status == "succeeded", job.error
    assert job.stats["switched"] is True and job.stats["caught_up_at_switch"] + job.stats["staged"] >= 1
    after = stored(admin_engine, admin.org_id)
    items = {k for k in rows if k[0] != "lexeme"}
    assert {k for k in after if k[0] != "lexeme"} == (items - {("episode", gone)}) | {("episode", new.json()["id"])}
    assert {("lexeme", "written"), ("lexeme", "run")} <= set(after)  # the vocabulary the write brought
    for text, v in after.values():
        assert float(np.dot(v, models.vec(E5, text))) > 0.999
    with Session(admin_engine) as db:
        assert db.query(repo.StagedVector).filter_by(org_id=admin.org_id).count() == 0
        assert repo.run_of(db, admin.org_id) is None
    assert client.get("/v1/orgs/current/embedder", headers=admin.h).json() == {"model": E5, "dimensions": 384}
    assert _ids(client, admin.h, "when are invoices sent")  # queries now embedded by e5

    # A write that embedded with MiniLM and commits after the switch is embedded again with e5.
    from app.auth.principal import Principal
    from app.episodes import service as episodes
    from app.episodes.schemas import EpisodeIn

    p = Principal(org_id=admin.org_id, user_id=admin.user_id, name=admin.name, roles=("admin",), groups=(), clearances=())
    old = app.state.embedders.get(MINI)
    with app.state.sessions() as db:
        from app.kit.database.db import bind_principal

        bind_principal(db, p)
        late = episodes.create_many(db, old, p, [EpisodeIn(kind="note", content="a late kafka write")])
        db.commit()
    text, v = stored(admin_engine, admin.org_id)[("episode", str(late[0].id))]
    assert float(np.dot(v, models.vec(E5, text))) > 0.999
    _back_to_minilm(run_job, admin.org_id)
    assert models.models(stored(admin_engine, admin.org_id)) == {MINI}


def test_only_admins_start_a_reembedding_and_a_new_dimension_is_refused(client, world, monkeypatch):
    org = world.org()
    member, steward, admin = world.user(org), world.user(org, roles=["steward"]), world.user(org, roles=["admin"])
    body = {"kind": "reembed", "params": {"model": E5}}
    assert client.post("/v1/jobs", json=body, headers=member.h).status_code == 403
    assert client.post("/v1/jobs", json=body, headers=steward.h).status_code == 403
    monkeypatch.setenv("MEMSCALE_EMBEDDING_DIM", "1024")
    wide = client.post(
        "/v1/jobs", json={"kind": "reembed", "params": {"model": "openai/text-embedding-3-large"}}, headers=admin.h
    )
    assert wide.status_code == 422 and wide.json()["error"]["code"] == "dimension_change"
    assert "migration" in wide.json()["error"]["message"]
    monkeypatch.delenv("MEMSCALE_EMBEDDING_DIM")
    ok = client.post("/v1/jobs", json=body, headers=admin.h)
    assert ok.status_code == 202, ok.text
    assert (
        client.post(f"/v1/jobs/{ok.json()['id']}/cancel", headers=admin.h).status_code == 200
    )  # no worker of another test runs it
