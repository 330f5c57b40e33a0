"""Ingest at the speed of the embedder: the fair lane's slices are taken longest first (little
padding) and come back in the caller's order; a batch's rows are stored slice by slice while the
next slice embeds, in one transaction, so a failure half-way writes nothing."""

from __future__ import annotations

import threading
import time
import uuid

import numpy as np
from sqlalchemy import event, text

from app.kit.runtime.fairness import FairEmbedder, _tokens
from app.kit.stages import Stages, recording, stage


class ByLength:
    """Vectors that name their text's length; records each call's texts."""

    dim = 4

    def __init__(self):
        self.calls: list[list[str]] = []

    def embed(self, texts):
        self.calls.append(list(texts))
        return np.array([[len(t), 0, 0, 1] for t in texts], dtype=np.float32)


def test_write_slices_go_longest_first_and_come_back_in_order():
    inner = ByLength()
    fair = FairEmbedder(inner, slice_tokens=40)
    texts = [("w " * n).strip() for n in (3, 40, 7, 1, 25, 12, 40, 2, 9, 30)]
    out = fair.embed_write("k", texts)
    assert [int(v[0]) for v in out] == [len(t) for t in texts]  # the caller's order
    lengths = [len(t) for call in inner.calls for t in call]
    assert lengths == sorted(lengths, reverse=True)  # one length after another: little padding per slice
    assert len(inner.calls) > 1 and all(sum(map(_tokens, c)) <= 40 or len(c) == 1 for c in inner.calls)
    assert fair._pending == {}  # every admitted item released


def test_stage_times_are_exclusive_and_off_by_default():
    with stage("nothing"):  # no recorder: nothing happens
        pass
    with recording() as rec:
        with stage("outer", scope=True):
            time.sleep(0.05)
            with stage("inner"):
                time.sleep(0.05)
    assert set(rec.seconds) == {"outer", "outer.inner"}
    assert 0.04 < rec.seconds["outer"] < 0.09 and 0.04 < rec.seconds["outer.inner"] < 0.09
    assert rec.calls["outer"] == 1 and isinstance(rec, Stages)


class Slow:
    """The real model, a little slower per call, failing on a call that holds text `fail_on` if
    given; records when each call started."""

    def __init__(self, real, fail_on: str | None = None):
        self.real, self.dim, self.fail_on = real, real.dim, fail_on
        self.started: list[float] = []
        self.lock = threading.Lock()

    def embed(self, texts):
        with self.lock:
            self.started.append(time.perf_counter())
        if self.fail_on is not None and self.fail_on in texts:
            raise RuntimeError("model failed")
        time.sleep(0.15)
        return self.real.embed(texts)


def _inserts(engine):
    seen: list[float] = []

    def on(conn, cursor, statement, *_):
        if statement.lstrip().upper().startswith("INSERT INTO EPISODES"):
            seen.append(time.perf_counter())

    event.listen(engine, "before_cursor_execute", on)
    return seen, lambda: event.remove(engine, "before_cursor_execute", on)


def _turns(n: int) -> list[str]:
    return [
        f"turn {i}: the {w} crew fixed the {w} pipeline before the demo" + " again" * (i % 5)
        for i, w in enumerate(["harbour", "glacier", "orchard", "lantern", "meadow", "quarry", "canyon", "violet"][:n])
    ]


def test_a_batch_is_stored_while_its_next_slice_embeds(client, app, world, admin_engine, embedder, swap_state):
    alice = world.user(world.org())
    slow = Slow(embedder)
    swap_state(app.state, "embedder", FairEmbedder(slow, slice_tokens=40))  # two or three turns a slice
    seen, stop = _inserts(app.state.engine)
    texts = _turns(8)
    try:
        r = client.post("/v1/episodes/batch", json={"items": [{"kind": "note", "content": t} for t in texts]}, headers=alice.h)
    finally:
        stop()
    assert r.status_code == 201, r.text
    assert len(slow.started) >= 3 and len(seen) >= 2
    assert seen[0] < slow.started[-1]  # the first slice's rows went in before the last slice was embedded
    with admin_engine.connect() as c:
        stored = {
            row.id: row
            for row in c.execute(
                text("SELECT id, content, embedding::text AS v FROM episodes WHERE org_id = :o"), {"o": alice.org_id}
            )
        }
    ids = r.json()["ids"]
    assert [stored[uuid.UUID(i)].content for i in ids] == texts  # ids in the request's order
    want = embedder.embed(texts)
    for i, t in zip(ids, texts):
        got = np.array([float(x) for x in stored[uuid.UUID(i)].v.strip("[]").split(",")])
        assert np.allclose(got, want[texts.index(t)], atol=1e-4)  # each row holds its own text's vector


def _counts(engine, org_id) -> dict:
    """Rows of the org per table that a write touches (... rolled back with the rest: none new)."""
    with engine.connect() as c:
        return {
            t: c.execute(text(f"SELECT count(*) FROM {t} WHERE org_id = :o"), {"o": org_id}).scalar()
            for t in ("episodes", "lexicon", "audit_log")
        }


def test_a_slice_failing_half_way_writes_nothing(client, app, world, admin_engine, embedder, swap_state):
    alice = world.user(world.org())
    texts = _turns(8)
    slow = Slow(embedder, fail_on=texts[0])  # among the shortest: in the last slice (longest go first)
    swap_state(app.state, "embedder", FairEmbedder(slow, slice_tokens=40))
    before = _counts(admin_engine, alice.org_id)
    seen, stop = _inserts(app.state.engine)
    try:
        r = client.post("/v1/episodes/batch", json={"items": [{"kind": "note", "content": t} for t in texts]}, headers=alice.h)
    finally:
        stop()
    assert r.status_code == 500
    assert seen  # the first slice was stored before the failure ...
    assert _counts(admin_engine, alice.org_id) == before == {"episodes": 0, "lexicon": 0, "audit_log": before["audit_log"]}
    ok = client.post("/v1/episodes/batch", json={"items": [{"kind": "note", "content": "after"}]}, headers=alice.h)
    assert ok.status_code == 201  # the pipeline's place and the lane's queue were given back


def _cli(settings, *args):
    import os
    import subprocess
    import sys

    env = {**os.environ, "MEMSCALE_DATABASE_URL": settings.database_url}
    return subprocess.run([sys.executable, "-m", "app", *args], check=False, env=env, capture_output=True, text=True, timeout=300)


def test_import_with_a_bad_line_writes_nothing_and_names_the_line(settings, world, admin_engine, tmp_path):
    import json

    org = world.org()
    alice = world.user(org, "alice")
    lines = [
        json.dumps({"kind": "note", "content": "first"}),
        "",
        json.dumps({"kind": "note", "content": "second"}),
        json.dumps({"kind": "memo", "content": "third"}),
    ]
    f = tmp_path / "episodes.jsonl"
    f.write_text("\n".join(lines) + "\n")
    before = _counts(admin_engine, alice.org_id)
    r = _cli(settings, "admin", "import", str(f), "--org", org, "--user", "alice")
    assert r.returncode == 2 and r.stdout == ""
    assert "line 4: kind:" in r.stderr, r.stderr
    assert _counts(admin_engine, alice.org_id) == before


def test_import_checks_scope_like_the_api_and_writes_in_one_pass(app, world, admin_engine, embedder, client):
    import pytest

    from app.episodes import bulk
    from app.kit.database.db import bind_principal, transaction
    from app.kit.errors import AppError

    org = world.org()
    alice = world.user(org, "alice", groups=("ops",))
    bob = world.user(org, "bob")
    from sqlalchemy.orm import Session

    with Session(admin_engine) as db:
        principal = bulk.principal_of(db, org, "alice")
    body = [
        {"kind": "note", "content": "the glacier camera froze at dawn"},
        {"kind": "note", "content": "ops rotated the harbour keys", "visibility": "group", "groups": ["ops"]},
        {"kind": "feedback", "content": "everyone liked the orchard offsite", "visibility": "org"},
    ]
    import json

    bad = bulk.parse_lines(
        [json.dumps(b) for b in body]
        + [json.dumps({"kind": "note", "content": "x", "visibility": "group", "groups": ["finance"]})]
    )
    before = _counts(admin_engine, alice.org_id)
    with pytest.raises(AppError), transaction(app.state.sessions) as db:  # not in group finance: refused, like the API
        bind_principal(db, principal)
        bulk.import_items(db, embedder, principal, bad)
    assert _counts(admin_engine, alice.org_id) == before
    seen = []
    with transaction(app.state.sessions) as db:
        bind_principal(db, principal)
        ids = bulk.import_items(
            db,
            embedder,
            principal,
            bulk.parse_lines([json.dumps(b) for b in body]),
            on_progress=lambda done, total: seen.append((done, total)),
        )
    assert seen[-1] == (3, 3) and len(ids) == 3
    after = _counts(admin_engine, alice.org_id)
    assert after["episodes"] == 3 and after["lexicon"] > 0 and after["audit_log"] == before["audit_log"] + 1
    with admin_engine.connect() as c:
        rows = {
            r.id: r
            for r in c.execute(
                text("SELECT id, content, visibility, owner_id, embedding::text AS v FROM episodes WHERE org_id = :o"),
                {"o": alice.org_id},
            )
        }
    want = embedder.embed([b["content"] for b in body])
    for i, b, w in zip(ids, body, want):
        row = rows[i]
        assert (row.content, row.visibility, row.owner_id) == (b["content"], b.get("visibility", "private"), alice.user_id)
        assert np.allclose([float(x) for x in row.v.strip("[]").split(",")], w, atol=1e-4)
    assert client.get(f"/v1/episodes/{ids[0]}", headers=bob.h).status_code == 404  # alice's private row
    assert client.get(f"/v1/episodes/{ids[2]}", headers=bob.h).status_code == 200  # the org-wide one


class Keeps:
    """The real model; keeps the float32 vector it gave for each text."""

    def __init__(self, real):
        self.real, self.dim, self.gave = real, real.dim, {}

    def embed(self, texts):
        out = np.asarray(self.real.embed(texts), dtype=np.float32)
        self.gave.update(zip(texts, out))
        return out


def test_a_write_sends_vectors_packed_and_stores_them_bit_for_bit(
    client, app, world, admin_engine, embedder, swap_state, monkeypatch
):
    """The rows' and the new words' vectors go to PostgreSQL in pgvector's binary form (no float is
    printed in Python on the writer's thread) and come back exactly as the model made them."""
    import pgvector

    alice = world.user(world.org())
    keeps = Keeps(embedder)
    swap_state(app.state, "embedder", FairEmbedder(keeps, slice_tokens=40))
    printed = []
    real_to_text = pgvector.Vector.to_text
    monkeypatch.setattr(pgvector.Vector, "to_text", lambda self: printed.append(1) or real_to_text(self))
    texts = _turns(8)
    r = client.post("/v1/episodes/batch", json={"items": [{"kind": "note", "content": t} for t in texts]}, headers=alice.h)
    assert r.status_code == 201, r.text
    assert printed == []
    _stored_as_made(admin_engine, alice.org_id, texts, keeps)


def _stored_as_made(admin_engine, org_id, texts: list[str], keeps) -> None:
    """The org's rows are `texts`, it has new words, and every row's and word's vector read back as
    text (PostgreSQL's shortest float4 form) equals the model's float32s."""
    with admin_engine.connect() as c:
        rows = c.execute(text("SELECT content, embedding::text AS v FROM episodes WHERE org_id = :o"), {"o": org_id}).all()
        words = c.execute(text("SELECT word, embedding::text AS v FROM lexicon WHERE org_id = :o"), {"o": org_id}).all()
    assert sorted(r.content for r in rows) == sorted(texts) and len(words) > 10

    def exact(stored: str, made) -> bool:
        return np.array_equal(np.array(stored.strip("[]").split(","), dtype=np.float32), made)

    assert all(exact(r.v, keeps.gave[r.content]) for r in rows)
    assert all(exact(w.v, keeps.gave[w.word]) for w in words)


def test_an_import_stores_the_models_vectors_bit_for_bit(app, client, world, admin_engine, embedder):
    """The bulk path's COPY writes each vector's floats in hexadecimal: what is stored is exactly
    what the model made, rows and new words alike."""
    import json

    from sqlalchemy.orm import Session

    from app.episodes import bulk
    from app.kit.database.db import bind_principal, transaction

    org = world.org()
    alice = world.user(org, "alice")
    with Session(admin_engine) as db:
        principal = bulk.principal_of(db, org, "alice")
    keeps = Keeps(embedder)
    texts = _turns(8)
    with transaction(app.state.sessions) as db:
        bind_principal(db, principal)
        bulk.import_items(db, keeps, principal, bulk.parse_lines([json.dumps({"kind": "note", "content": t}) for t in texts]))
    _stored_as_made(admin_engine, alice.org_id, texts, keeps)


def test_vector_text_reads_back_exactly():
    from app.episodes.repository import vector_text

    v = np.array([0.1, -1.5, 0.0, 3.4e-39, 1e-7, -0.333333], dtype=np.float32)
    assert vector_text(v) == "[" + ",".join(float(x).hex() for x in v) + "]"
    assert np.array_equal(np.array([float.fromhex(x) for x in vector_text(v).strip("[]").split(",")], dtype=np.float32), v)
