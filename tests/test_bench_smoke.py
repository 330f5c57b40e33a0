"""The benchmarks' quick modes end to end (real service, real pipelines, real local models), plus the
pure pieces they rely on: the synthetic spaces' gold SQL and the agent's action parser."""

from __future__ import annotations

import json
import random

import pytest

HEAD = "0036"  # the newest migration (the hash layout is at head)


def _unit(x) -> bool:
    return isinstance(x, (int, float)) and 0.0 <= x <= 1.0


def test_spaces_gold_sql_carries_every_key_and_runs(tmp_path):
    from bench.quality.memory_scaling.agent import run_sql, same_result
    from bench.quality.memory_scaling.spaces import found_keys, make_space

    rng = random.Random(1)
    sp = make_space(rng, 0, tmp_path, set())
    assert len({q.intent for q in sp.intents}) == len(sp.intents) > 30
    for q in sp.intents:
        assert found_keys(q.sql, q.keys) == set(q.keys), q.intent
        rows, err = run_sql(sp.path, q.sql)
        assert err == "" and same_result(rows, q.gold)
    # expert schema docs hold the mappings but none of the implicit conventions
    doc = sp.expert_doc()
    assert "conv:fiscal_quarter" not in found_keys(doc, sp.keys("fiscal_quarter"))
    assert found_keys(doc, sp.keys("join", "cancelled")) == set(sp.keys("join", "cancelled"))


def test_agent_parses_the_forms_small_models_produce(tmp_path):
    from bench.quality.memory_scaling.agent import parse_action, run_sql

    assert parse_action("SQL: SELECT 1; trailing words").arg == "SELECT 1"
    assert parse_action("```sql\nSELECT a\nFROM b\n```").arg == "SELECT a FROM b"
    assert parse_action('{"tool": "run_sql", "arguments": {"sql": "SELECT 2"}}').arg == "SELECT 2"
    assert parse_action("I will SEARCH: fiscal quarter rule").kind == "search"
    assert parse_action("TABLES").kind == "tables"
    assert parse_action("Sure! The answer: select count(*) from t").kind == "sql"
    assert parse_action("I do not know.").kind == "invalid"
    import sqlite3

    path = tmp_path / "x.sqlite"
    sqlite3.connect(path).execute("CREATE TABLE t (a)").connection.commit()
    assert run_sql(path, "DELETE FROM t")[0] is None  # read-only
    assert run_sql(path, "SELECT nope FROM t")[1].startswith("OperationalError")


def test_scaling_learned_manager_only_where_the_jobs_take_it():
    """`--manager learned` reaches the distill/consolidate jobs as their `manager` param, or is
    refused when neither job declares one (never run as the rules under another name)."""
    from bench.quality.memory_scaling.__main__ import parse
    from bench.quality.memory_scaling.run import Harness, manager_supported

    assert parse(["--quick"]).manager == "rules"
    takes = {k: manager_supported(k) for k in ("distill", "consolidate")}
    if any(takes.values()):
        assert parse(["--quick", "--manager", "learned"]).manager == "learned"
    else:
        with pytest.raises(SystemExit):
            parse(["--quick", "--manager", "learned"])
    h = Harness.__new__(Harness)  # manager_param reads only the choice and the job table
    h.manager = "learned"
    for kind, yes in takes.items():
        assert h.manager_param(kind) == ({"manager": "learned"} if yes else {})


@pytest.mark.slow
def test_scaling_quick(settings, embedder, tmp_path):
    from bench.quality.memory_scaling.__main__ import main

    r = main(["--quick", "--out", str(tmp_path)], embedder=embedder)
    saved = json.loads((tmp_path / "scaling_quick.json").read_text())
    assert saved["points"] == r["points"] == [0, 1, 2]
    assert (tmp_path / "scaling_quick.png").stat().st_size > 10_000
    assert "memory hit rate" in (tmp_path / "scaling_quick.md").read_text()
    for name in ("labelled", "unlabelled_judge", "bootstrap"):
        points = r["curves"][name]
        assert [p["shards"] for p in points] == [0, 1, 2]
        for p in points:
            assert _unit(p["hit_rate"]) and _unit(p["key_recall"]) and p["context_tokens_mean"] <= r["budget_tokens"]
        assert points[0]["hit_rate"] == 0.0 and points[0]["memory"]["episodes"] == 0
        assert points[-1]["hit_rate"] >= points[0]["hit_rate"]
        assert points[-1]["key_recall"] > points[0]["key_recall"]
    assert _unit(r["expert"]["hit_rate"]) and r["expert"]["convention_keys_found"] == 0.0
    agent = r["curves"]["labelled"][-1]["agent"]
    assert agent["questions"] == 1 and 1 <= agent["mean_steps"] <= r["max_steps"] and _unit(agent["execution_accuracy"])
    assert r["agent_traces"] and r["agent_traces"][0]["trace"]
    poison = r["poison"]
    assert _unit(poison["poisoned"]["hit_rate"]) and _unit(poison["poisoned"]["poison_exposure"])
    assert poison["clean"]["poison_exposure"] == 0.0
    # episodes the judge quarantined are never served: no injection reaches a context
    assert poison["poisoned"]["poison_exposure_by_type"]["injection"] == 0.0
    assert poison["poisoned"]["memory"]["episodes_quarantined"] >= 1  # the injections were caught
    for org in ("unlabelled", *r["feedback"]["variants"]):  # each feedback org distils the same shards
        seen = sum(j["seen"] for j in r["jobs"] if j["kind"] == "distill" and j["org"] == org)
        assert seen == r["shard_sizes"]["logs"] * max(r["points"]) + r["shard_sizes"]["poison"], org


@pytest.mark.slow
def test_scaling_feedback_stream_on_a_tiny_space(settings, embedder, tmp_path):
    """The feedback stream end to end on one space and one shard: every simulated user's feedback
    is stored through the API on retrievals that user received (the adversary only in its own
    org), and the report sets each variant beside the curve without feedback and the ceiling."""
    from sqlalchemy import create_engine, text

    from bench.common import database_settings
    from bench.quality.memory_scaling.__main__ import main
    from bench.quality.memory_scaling.feedback import ADVERSARY, USERS

    name = "scaling_feedback_smoke"
    args = ["--quick", "--spaces", "1", "--shards", "0,1", "--logs-per-shard", "4", "--poison", "2"]
    args += ["--train-per-space", "5", "--feedback-adversarial", "1", "--agent-scope", "none", "--curves", "unlabelled,feedback"]
    r = main([*args, "--name", name, "--out", str(tmp_path)], embedder=embedder)
    fb = r["feedback"]
    assert set(fb["variants"]) == {"feedback_clean", "feedback_noisy", "feedback_adversarial"}
    assert fb["split"].startswith("training questions from intents no test question uses")
    for v_name, v in fb["variants"].items():
        assert [p["shards"] for p in v["points"]] == [1] and _unit(v["points"][0]["ceiling"])
        assert v["points"][0]["hit_without"] <= v["points"][0]["ceiling"]
        assert set(v["stored_by_user"]) == set(v["posts_by_user"]) and set(v["stored_by_user"]) >= set(USERS)
        assert v["stored_by_user"] == v["posts_by_user"]  # every post stored, none lost or doubled
        assert (ADVERSARY in v["stored_by_user"]) == (v_name == "feedback_adversarial")
        assert sum(v["signals_sent"].values()) > 0
    assert r["curves"]["feedback_clean"][0]["shards"] == 0 and "top3" in fb["without_poisoned"]
    eng = create_engine(database_settings("memscale_bench_" + name).database_url)
    try:
        with eng.connect() as c:
            rows = c.execute(
                text(
                    "SELECT o.name, u.name, count(*), count(*) FILTER (WHERE re.actor_id = e.actor_id)"
                    " FROM feedback_events e JOIN users u ON u.id = e.actor_id JOIN orgs o ON o.id = e.org_id"
                    " JOIN retrieval_events re ON re.id = e.retrieval_id GROUP BY o.name, u.name"
                )
            ).all()
    finally:
        eng.dispose()
    stored = {(org, user): n for org, user, n, own in rows if n == own}  # each on the user's own retrieval
    assert len(stored) == len(rows)
    for v_name, v in fb["variants"].items():
        assert {u: n for (org, u), n in stored.items() if org == v_name} == v["stored_by_user"]
    md = (tmp_path / f"{name}.md").read_text()
    assert "| shards | ceiling | hit without | hit with | gap closed |" in md and "### Targets" in md


@pytest.mark.slow
def test_locomo_quick(settings, embedder, tmp_path):
    from bench.quality.locomo.__main__ import main

    r = main(["--quick", "--out", str(tmp_path)], embedder=embedder)
    assert (tmp_path / "locomo_quick.png").stat().st_size > 10_000
    assert "Evidence recall" in (tmp_path / "locomo_quick.md").read_text()
    assert r["questions"] == len(r["questions_detail"]) > 0
    searched = ["context@1000", "vector", "text", "hybrid"]
    assert list(r["methods"]) == searched + ["full"]
    for m in searched:
        e = r["methods"][m]
        assert _unit(e["recall@10"]) and _unit(e["recall_in_context"]) and _unit(e["recall@5"])
        assert e["recall@5"] <= e["recall@10"] <= e["recall@25"]
        for c in e["per_category"].values():
            assert _unit(c["recall@10"])
    assert 0 < r["methods"]["context@1000"]["service_tokens_mean"] <= 1000
    # text search ORs the question's words (an AND of every word found almost nothing: recall@10 0.12)
    assert r["methods"]["text"]["recall@10"] >= 0.5
    assert r["methods"]["full"]["recall_in_context"] == 1.0  # the quick slice fits the reader's window
    reader = r["reader"]
    assert set(reader) == {"context@1000", "vector", "text", "full"}
    for e in reader.values():
        assert e["n"] == 1 and _unit(e["f1"]) and e["judge_accuracy"] is None


@pytest.mark.slow
def test_scaling_inside_a_branch_matches_main(settings, embedder, tmp_path):
    """The real pipelines run twice in one populated org, in main and in a branch forked before
    main's run: the same keys in every context, and main's rows unchanged by the branch's run."""
    from bench.quality.memory_scaling.in_branch import main

    r = main(
        [
            "--quick",
            "--agent-scope",
            "none",
            "--curves",
            "labelled,bootstrap",
            "--shards",
            "0,1",
            "--background-shards",
            "1",
            "--out",
            str(tmp_path),
        ],
        embedder=embedder,
    )
    assert set(r["curves"]) == {"labelled", "bootstrap", "bootstrap_enriched"}
    assert r["main_unchanged"] and all(c["main_rows"]["knowledge_assets"]["rows"] > 0 for c in r["curves"].values())
    for c in r["curves"].values():
        for p in c["points"]:
            assert p["questions_same_keys"] == p["questions_same_tokens"] == p["questions"] > 0, p
    assert r["all_equal"] and (tmp_path / "scaling_in_branch.md").exists()


def test_growth_quick(settings, tmp_path):
    """The growth curve at 1k and 5k items: every arm measured at both sizes, the vector stage's
    recall against the exact filtered search reported, the plot drawn."""
    from bench.speed.growth.__main__ import main

    r = main(["--quick", "--out", str(tmp_path / "growth_quick.json")])
    assert [row["items"] for row in r["rows"]] == [1000, 5000]
    for row in r["rows"]:
        assert all(
            0 < row[arm]["p50_ms"] <= row[arm]["p95_ms"]
            for arm in (
                "one type",
                "all types",
                "all types sequential",
                "context",
                "one type HTTP",
                "all types HTTP",
                "context HTTP",
            )
        )
        assert all(v["visible_memories"] > 0 and v["recall@10"] >= 0.95 for v in row["vector_recall"].values())
    assert (tmp_path / "growth_quick.png").stat().st_size > 10_000
    assert (
        "hybrid all types" in (tmp_path / "growth_quick.md").read_text()
        and "/v1/context" in (tmp_path / "growth_quick.md").read_text()
    )


def test_scale_org_sizes_are_skewed_as_stated():
    from bench.speed.scale.data import org_sizes, users_per_org

    s = org_sizes(1_000_000, 1000)
    assert len(s) == 1000 and s.sum() == 1_000_000
    assert s[0] == 200_000 and list(s[1:11]) == [20_000] * 10 and s[11:].min() >= 20 and s[11:].max() < 20_000
    u = users_per_org(s)
    assert u[0] == 2000 and set(u[1:11]) == {200} and u[11:].min() >= 3


def test_scale_bench_tiny_hash_layout(settings, embedder, tmp_path):
    """The whole bench at tiny scale on the partitioned layout (the schema since migration 0015),
    rebuilt with 3 partitions instead of 16 by the migration's own rebuild: an HNSW index in each,
    every staged item loaded, per-class figures measured, RLS still in force on the new tables."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ProgrammingError

    from app.kit.database.pg import app_url
    from bench.speed.scale.__main__ import main

    out = tmp_path / "scale.json"
    r = main(
        [
            "--items",
            "3000",
            "--orgs",
            "15",
            "--base",
            "300",
            "--queries",
            "4",
            "--ingest",
            "20",
            "--layout",
            "hash",
            "--partitions",
            "3",
            "--db",
            "memscale_bench_scale_smoke",
            "--cache",
            str(tmp_path),
            "--out",
            str(out),
        ],
        embedder=embedder,
    )
    assert json.loads(out.read_text())["classes"].keys() == {"largest", "2 %", "small (median)"}
    assert "| largest | 600 |" in out.with_suffix(".md").read_text()
    assert [st["rows_after"] for st in r["stages"]] == [300, 3000]
    assert r["tables"] == {"episodes": 3, "memories": 3, "revision": HEAD}
    assert sum(s["rows"] for s in r["sizes"].values()) == 3000 + 2 * 20  # staged items + the HTTP ingests
    for t in ("episodes", "memories"):
        assert r["sizes"][t]["index_mb"][f"ix_{t}_embedding_hnsw"] > 0  # built in every partition
    for c in r["classes"].values():
        for t in ("memory", "episode"):
            assert 0 < c["visible"][t]["visible"] < c["visible"][t]["org_rows"]  # the ACL filters
        assert c["hybrid_all_types_server"]["n"] == c["hybrid_all_types_http"]["n"] == 4
        assert all(v >= 0.9 for v in c["recall"].values())
    db = "memscale_bench_scale_smoke"
    eng = create_engine(make_url(settings.database_url).set(database=db))
    with eng.connect() as c:
        parts = c.execute(text("SELECT count(*) FROM pg_inherits WHERE inhparent = 'episodes'::regclass")).scalar()
        hnsw = c.execute(
            text("SELECT count(*) FROM pg_indexes WHERE indexdef LIKE '%USING hnsw%' AND tablename LIKE 'episodes_p%'")
        ).scalar()
        assert parts == 3 and hnsw == 2 * parts  # in each partition: the whole graph and the org-visible one
    eng.dispose()
    eng = create_engine(make_url(app_url(settings)).set(database=db))
    with eng.connect() as c:  # the service's role, no principal bound: RLS shows no row of the new tables
        assert c.execute(text("SELECT count(*) FROM episodes")).scalar() == 0
    with eng.connect() as c, pytest.raises(ProgrammingError, match="permission denied"):
        c.execute(text("SELECT count(*) FROM memories_p00"))  # a partition is reached only through its table's RLS
    eng.dispose()

    # The same database copied into both layouts and measured interleaved (bench.tools.scale_layouts).
    from bench.tools.scale_layouts import main as layouts

    lay = layouts(
        [
            "--from",
            db,
            "--org",
            "scale-0000",
            "--queries",
            "3",
            "--write-rounds",
            "1",
            "--write-batch",
            "50",
            "--explain",
            "2",
            "--out",
            str(tmp_path / "layouts.json"),
        ]
    )
    g, h = lay["dbs"].values()
    assert g["layout"] == {"episodes": 0, "memories": 0, "revision": "0014"}
    assert h["layout"] == {"episodes": 3, "memories": 3, "revision": HEAD} and g["org_rows"] == h["org_rows"] > 0
    assert lay["prepare"][f"migrate_{db}_global"]["to"] == "0014" and lay["explain_statements"] > 0
    assert set(lay["ratio_second_over_first"]) >= {
        "hybrid_all_types",
        "http_hybrid_all_types",
        "insert_50_episodes",
        "explain_planning",
    }
    assert all(d[k]["n"] == 3 for d in (g, h) for k in ("hybrid", "http_hybrid_all_types"))
    assert all(d["explain_planning"]["n"] == 2 for d in (g, h))
    server = create_engine(make_url(settings.database_url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    with server.connect() as c:
        for copy in lay["dbs"]:
            c.execute(text(f"DROP DATABASE IF EXISTS {copy} WITH (FORCE)"))
    server.dispose()


def test_scale_bench_tiny_global_layout(settings, embedder, tmp_path):
    """`--layout global`, kept for comparison: the bench database migrated down past 0015 (one
    table per type, one global HNSW index), loaded and measured the same way."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from bench.speed.scale.__main__ import main

    out = tmp_path / "scale_global.json"
    r = main(
        [
            "--items",
            "2000",
            "--orgs",
            "12",
            "--base",
            "300",
            "--queries",
            "4",
            "--ingest",
            "10",
            "--layout",
            "global",
            "--db",
            "memscale_bench_scale_smoke_global",
            "--cache",
            str(tmp_path),
            "--out",
            str(out),
        ],
        embedder=embedder,
    )
    assert r["tables"] == {"episodes": 0, "memories": 0, "revision": "0014"}
    assert "layout global (one table per type)" in out.with_suffix(".md").read_text()
    assert sum(s["rows"] for s in r["sizes"].values()) == 2000 + 2 * 10
    for c in r["classes"].values():
        assert c["hybrid_all_types_server"]["n"] == c["hybrid_all_types_http"]["n"] == 4
        assert all(v >= 0.9 for v in c["recall"].values())
    eng = create_engine(make_url(settings.database_url).set(database="memscale_bench_scale_smoke_global"))
    with eng.connect() as c:
        kinds = dict(c.execute(text("SELECT relname, relkind FROM pg_class WHERE relname IN ('episodes', 'memories')")).all())
        hnsw = c.execute(
            text("SELECT count(*) FROM pg_indexes WHERE indexdef LIKE '%USING hnsw%' AND tablename IN ('episodes', 'memories')")
        ).scalar()
    eng.dispose()
    assert kinds == {"episodes": "r", "memories": "r"} and hnsw == 2


def test_rewrite_pilot_reads_the_models_lines_and_merges_by_best_score():
    """The pilot behind docs/decisions.md's "An LLM query rewrite": list marks, the question
    itself, duplicates and empty lines are not queries; a rewrite's hit enters the top k only by
    beating the question's own scores after its weight."""
    from bench.research.rewrite_pilot import merged, rewrites

    raw = '1. Jon job\n- Jon job\nWhen did Jon lose his job?\n"Jon fired"\n\n2) Jon unemployed\nx\nJon hired'
    assert rewrites(raw, "When did Jon lose his job?") == ["Jon job", "Jon fired", "Jon unemployed"]
    base, runs = [("a", 0.9), ("b", 0.5)], [[("c", 0.8), ("b", 0.95)]]
    assert merged(base, runs, 1.0, 2) == ["b", "a"]
    assert merged(base, runs, 0.9, 3) == ["a", "b", "c"]  # b: max(0.5, 0.855); c: 0.72
    assert merged(base, runs, 0.5, 2) == ["a", "b"]


HEADLINES = {  # bench/README.md's headline commands and what their --help must tell a newcomer
    "bench.quality.locomo": ("--quick", "LoCoMo"),
    "bench.quality.memory_scaling": ("--quick", "hit rate"),
    "bench.speed.service": ("--out", "bench/results/service.json"),
}


@pytest.mark.parametrize("module", sorted(HEADLINES))
def test_headline_commands_explain_themselves(module):
    """A newcomer's first step: `python -m <headline> --help` prints what the bench measures and its
    options, without a database, a model or the LoCoMo data file."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    r = subprocess.run([sys.executable, "-m", module, "--help"], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: ") and all(s in r.stdout for s in HEADLINES[module]), r.stdout
    readme = (root / "bench" / "README.md").read_text()
    assert f"python -m {module}" in readme.split("## Every bench")[0]  # listed among the headlines


def test_app_does_not_import_bench_at_import_time():
    """app/ runs without bench/ installed: a bench module may be imported only inside a function
    (app/bench_cli.py's subcommands), never at a module's top level."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    top_level = []
    for p in sorted((root / "app").rglob("*.py")):
        for node in ast.parse(p.read_text()).body:
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            top_level += [f"{p.relative_to(root)}: {n}" for n in names if n == "bench" or n.startswith("bench.")]
    assert top_level == []


def test_every_bench_command_answers_help():
    """Every module of bench/ that runs as a command parses `--help` and exits 0 without running:
    the commands share bench.command's parser (or their own, for those not yet moved to it)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    commands = sorted(
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__main__")
        for p in (root / "bench").rglob("*.py")
        if 'if __name__ == "__main__"' in p.read_text()
    )
    commands.remove("bench.research.locomo_ranking_latency")  # a script without options: it runs on any argument
    assert len(commands) > 30
    env = {**os.environ, "PYTHONPATH": str(root)}
    script = (
        "import runpy, sys\nfailed = []\nfor m in sys.argv[1:]:\n    sys.argv = [m, '--help']\n"
        "    try:\n        runpy.run_module(m, run_name='__main__')\n    except SystemExit as e:\n"
        "        if e.code not in (0, None): failed.append(m)\n    except Exception:\n        failed.append(m)\n"
        "    else:\n        failed.append(m)\n"
        "print('FAILED', failed)\n"
    )
    r = subprocess.run([sys.executable, "-c", script, *commands], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert "FAILED []" in r.stdout, (r.stdout[-2000:], r.stderr[-3000:])
