"""Re-embedding an org online (`--from` -> `--to`, default MiniLM -> e5-small) with `memscale
admin reembed`, killed with SIGKILL at random points and run again, while searches run against
the org.

    .venv/bin/python -m bench.speed.reembed --items 20000 [--kills 5] [--real 300] [--searches 20]
        [--from MODEL] [--to MODEL] [--data LOCOMO.json]

The service in this process is configured with the `--from` model (MEMSCALE_EMBEDDING_MODEL): it
creates the org, writes `--real` turns through the write path (real `--from` vectors and
vocabulary), then rows derived in SQL up to `--items` episodes (one turn's text plus words of
another, the sum of their vectors): the re-embedding has that many texts to embed with `--to`.
Configured with `--from`, the service serves the org before, during and after the run (after the
switch it embeds questions with the org's new model from its pool); a process configured with
`--to` would be refused at start unless a run were already under way. The CLI runs as its own
process, configured with `--to`, as an operator runs it.

- **kill -9**: `--kills` times the CLI is killed at a random point (uniform over a share of the
  time a run would take, so that the last run still has work), then run to the end. Before each
  kill and at every observation in between, every episode's vector is compared with its value
  before the run: either all equal (old model) or none (new model), never a mix. At the end: as
  many rows as before, no staged vector left, and a sample of rows holds `--to`'s vector of its
  text.
- **rate**: texts embedded and staged per second by the last (uninterrupted) run, its paused time
  and its start (~3 s) left out.
- **the switch's lock**: how long the switch held the org's exclusive embedder lock (the job's
  `switch_locked_s`), the time writes and searches of the org wait on it.
- **the switch, before and after** (`--switch-ab N`, after the run): N pairs of switches of the
  same org, each rolled back, alternating which goes first: the switch that locks first and
  copies under the lock (`online=False`, the switch's last try; the only switch before) and the
  one that copies first (`online=True`). Staged vectors for them are made in SQL (each row gets
  its neighbour's vector: a real change of every indexed value, never a HOT update).
- **search p95 during the run vs before**: during the last run, the CLI process is paused
  (SIGSTOP) and resumed (SIGCONT) in turns; each window issues `--searches` searches through the
  API in this process. Paused windows are "before" (no re-embedding competing), running windows
  "during": side by side, interleaved, on the same data and load.
Results: bench/results/reembed.json (or `--out`).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time

from sqlalchemy import create_engine, text

MINI, E5 = "local/all-minilm-l6-v2", "local/e5-small"
RATE_GUESS = {MINI: 25.0, E5: 10.0}  # texts/s a re-embedding reaches on this machine: the kills spread over a run
QUERIES = ["when did she go to the support group", "what does he paint", "who adopted a dog", "where did they travel", "what job"]


def parse(argv):
    ap = argparse.ArgumentParser(
        prog="python -m bench.speed.reembed", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--items", type=int, default=20000, help="episodes in the org")
    ap.add_argument("--real", type=int, default=300, help="of which written through the service")
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--searches", type=int, default=20, help="searches per paused or running window")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--from", dest="from_model", default=MINI, help="the model the org's vectors are made with first")
    ap.add_argument("--to", dest="to_model", default=E5, help="the model the CLI re-embeds the org to")
    ap.add_argument("--data", default=None, help="LoCoMo json (default: bench.quality.locomo's)")
    ap.add_argument("--switch-ab", type=int, default=3, help="pairs of switches (lock first / copy first), rolled back")
    ap.add_argument("--out", default=None)
    return ap.parse_args(argv)


def _turns(n: int, path: str | None) -> list[str]:
    from bench.quality.locomo.data import DEFAULT, load

    return [t.text for conv in load(path or DEFAULT) for t in conv.turns][:n]


def _mixed(c, org_id) -> tuple[int, int]:
    """(episodes whose vector is still the one before the run, episodes)."""
    row = c.execute(
        text(
            "SELECT count(*) FILTER (WHERE e.embedding = s.embedding), count(*) FROM episodes e"
            " JOIN bench_reembed_before s ON s.id = e.id WHERE e.org_id = :o"
        ),
        {"o": org_id},
    ).one()
    return int(row[0]), int(row[1])


def _switching(c) -> bool:
    """Whether an exclusive advisory lock is held (the switch's; nothing else here takes one)."""
    q = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND mode = 'ExclusiveLock' AND granted"
    return bool(c.execute(text(q)).scalar())


_STAGE = {"episode": ("episodes", "id", "episode_id"), "lexeme": ("lexicon", "lexeme", "lexeme")}


def _switch_ab(h, org_id, eng, model: str, pairs: int) -> dict:
    """`pairs` x (lock first, copy first) switches to `model` of the same staged vectors, each
    rolled back (see the module); the run is dropped at the end."""
    from app.embedders import service
    from app.kit.database.db import bind_principal
    from app.kit.tenancy.view import EVERY_BRANCH

    def session():
        db = h.state.sessions()
        bind_principal(db, None, org_id=org_id, all_scopes=True, view=EVERY_BRANCH)
        return db

    with session() as db:
        service.begin(db, org_id, model, 384, None)
        db.commit()
    with eng.connect() as c:
        for item, (table, key, ref) in _STAGE.items():
            c.execute(
                text(
                    f"INSERT INTO embedding_staging (org_id, item_type, item_key, {ref}, embedding)"
                    f" SELECT org_id, :item, {key}::text, {key}, coalesce(lead(embedding) OVER w, first_value(embedding) OVER w)"
                    f" FROM {table} WHERE org_id = :o WINDOW w AS (ORDER BY {key})"
                ),
                {"o": org_id, "item": item},
            )
    embedder = h.state.embedders.get()
    arms: dict[str, list[dict]] = {"lock_first": [], "copy_first": []}
    for i in range(pairs):
        for arm in ("lock_first", "copy_first") if i % 2 == 0 else ("copy_first", "lock_first"):
            with session() as db:
                t0 = time.monotonic()
                out = service.switch(db, org_id, embedder, online=arm == "copy_first")
                wall = time.monotonic() - t0
                db.rollback()
            arms[arm].append({"wall_s": round(wall, 3), **{k: v for k, v in out.items() if k != "model"}})
    with session() as db:
        service.abandon(db, org_id)
        db.commit()
    med = {arm: sorted(r["switch_locked_s"] for r in runs)[len(runs) // 2] for arm, runs in arms.items()}
    return {
        "runs": arms,
        "switch_locked_s_median": med,
        "locked_ratio_copy_first_over_lock_first": round(med["copy_first"] / max(med["lock_first"], 1e-9), 4),
    }


def main(argv=None) -> dict:
    a = parse(argv)
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.orgs import service as orgs
    from bench.common import fresh_database, load_average, pct, write_result
    from bench.speed.ingest_profile import Harness

    rng = random.Random(a.seed)
    h = Harness.__new__(Harness)
    h.settings = fresh_database("memscale_bench_reembed").model_copy(
        update={"log_level": "WARNING", "max_batch_items": 2000, "embedding_model": a.from_model}
    )
    h.app = create_app(h.settings)
    h.http = TestClient(h.app)
    h.http.__enter__()
    h.state = h.app.state
    from sqlalchemy.orm import Session

    from app.kit.database.pg import admin_url

    owner = create_engine(admin_url(h.settings))
    with Session(owner, expire_on_commit=False, info={"audit_key": h.settings.audit_secret()}) as db:
        org = orgs.create_org(db, "reembed", embedding_model=a.from_model)
        key = orgs.create_key(db, orgs.create_user(db, org, "writer", roles=("admin",)))
        db.commit()
    owner.dispose()
    with h.state.sessions() as db:
        principal = orgs.resolve_key(db, key)
    turns = _turns(a.real, a.data)
    for i in range(0, len(turns), 100):
        h.write(principal, turns[i : i + 100])
    h.fill(principal, a.items)
    eng = create_engine(admin_url(h.settings), isolation_level="AUTOCOMMIT")
    with eng.connect() as c:
        c.execute(
            text("CREATE TABLE bench_reembed_before AS SELECT id, embedding FROM episodes WHERE org_id = :o"),
            {"o": principal.org_id},
        )
        vocab = c.execute(text("SELECT count(*) FROM lexicon WHERE org_id = :o"), {"o": principal.org_id}).scalar()
    auth = {"Authorization": f"Bearer {key}"}

    env = {**os.environ, "MEMSCALE_DATABASE_URL": h.settings.database_url, "MEMSCALE_EMBEDDING_MODEL": a.to_model}
    cmd = [sys.executable, "-m", "app", "admin", "reembed", "--org", "reembed", "--model", a.to_model]
    guess_s = (a.items + vocab) / RATE_GUESS.get(a.to_model, 10.0)  # kills spread over a run's length
    mixes, kills = [], []
    for _ in range(a.kills):
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        at, t0 = rng.uniform(3.0, max(4.0, guess_s / (a.kills + 1))), time.monotonic()
        with eng.connect() as c:
            while p.poll() is None and time.monotonic() - t0 < at:
                old, n = _mixed(c, principal.org_id)
                mixes.append(0 < old < n)
                time.sleep(0.5)
        p.send_signal(signal.SIGKILL)
        p.wait()
        with eng.connect() as c:
            staged = c.execute(text("SELECT count(*) FROM embedding_staging WHERE org_id = :o"), {"o": principal.org_id}).scalar()
            old, n = _mixed(c, principal.org_id)
        mixes.append(0 < old < n)
        kills.append({"after_s": round(at, 1), "staged": staged, "old_vectors": old})

    def search() -> float:
        t = time.perf_counter()
        r = h.http.post("/v1/search", json={"query": rng.choice(QUERIES), "k": 10}, headers=auth)
        assert r.status_code == 200, r.text
        return time.perf_counter() - t

    with eng.connect() as c:
        staged0 = c.execute(text("SELECT count(*) FROM embedding_staging WHERE org_id = :o"), {"o": principal.org_id}).scalar()
    times = {"before": [], "during": []}
    t0, paused_s = time.monotonic(), 0.0
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    time.sleep(3.0)  # imports and model load
    with eng.connect() as c:
        while p.poll() is None:
            os.kill(p.pid, signal.SIGSTOP)  # "before": the same org and load, no re-embedding running
            t_stop = time.monotonic()
            if not _switching(c):  # stopped inside the switch, searches would wait for it: skip the window
                times["before"] += [search() for _ in range(a.searches)]
            os.kill(p.pid, signal.SIGCONT)
            paused_s += time.monotonic() - t_stop
            for _ in range(a.searches):  # "during"
                if p.poll() is not None:
                    break
                times["during"].append(search())
            old, n = _mixed(c, principal.org_id)
            mixes.append(0 < old < n)
    wall = time.monotonic() - t0
    out_line = p.stdout.read().strip().splitlines()[-1] if p.stdout else ""
    with eng.connect() as c:
        old, n = _mixed(c, principal.org_id)
        left = c.execute(text("SELECT count(*) FROM embedding_staging WHERE org_id = :o"), {"o": principal.org_id}).scalar()
        sample = c.execute(
            text("SELECT content, embedding::text FROM episodes WHERE org_id = :o ORDER BY random() LIMIT 20"),
            {"o": principal.org_id},
        ).all()
        model = c.execute(text("SELECT model FROM org_embedders WHERE org_id = :o"), {"o": principal.org_id}).scalar()
    import json

    import numpy as np

    from app.kit.runtime.embedding import make_embedder

    ref = np.asarray(make_embedder(h.settings, a.to_model).embed([s[0] for s in sample]), dtype=np.float32)
    got = np.array([json.loads(s[1]) for s in sample], dtype=np.float32)
    cos = (ref * got).sum(1)
    stats = json.loads(out_line).get("stats", {}) if out_line.startswith("{") else {}
    result = {
        "from": a.from_model,
        "to": a.to_model,
        "items": a.items,
        "real": a.real,
        "vocabulary": vocab,
        "kills": kills,
        "ever_mixed": any(mixes),
        "observations": len(mixes),
        "after": {"rows": n, "rows_before": a.items, "old_vectors": old, "staged_left": left, "model": model},
        "sample_cos_to_new_model_min": round(float(cos.min()), 5),
        "switch_locked_s": stats.get("switch_locked_s"),
        "last_run": {"staged_before": staged0, "wall_s": round(wall, 1), "paused_s": round(paused_s, 1), "cli": out_line[-400:]},
        "rate_texts_per_s": round((a.items + vocab - staged0) / max(wall - paused_s - 3.0, 1e-9), 1),
        "search": {
            k: {"p50_ms": round(1000 * pct(v, 50), 1), "p95_ms": round(1000 * pct(v, 95), 1), "n": len(v)}
            for k, v in times.items()
        },
        "load": load_average(),
    }
    if times["before"] and times["during"]:
        result["search"]["p95_ratio_during_over_before"] = round(pct(times["during"], 95) / pct(times["before"], 95), 2)
    if a.switch_ab:
        result["switch_ab"] = _switch_ab(h, principal.org_id, eng, a.from_model, a.switch_ab)
        result["load_after_switch_ab"] = load_average()
    h.close()
    eng.dispose()
    path = write_result("reembed", result, a.out)
    print(json.dumps(result, indent=1, default=str))
    print(f"written {path}")
    return result


if __name__ == "__main__":
    main()
