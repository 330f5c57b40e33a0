"""The memory-scaling run: orgs, shard-by-shard ingestion, the real pipelines, and measurement.

Each curve gets its own org in one fresh database; the API runs in-process (TestClient) and
every read goes through the typed client as the org's analyst (a plain member). Pipelines run as
operator jobs (actor None), as `memscale jobs run` does, so the bootstrap job may read the
spaces' SQLite files and glossaries from the temp folder.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from statistics import mean

from bench.quality.memory_scaling import agent as ag
from bench.quality.memory_scaling.spaces import Question, Space, found_keys


@dataclass
class Org:
    name: str
    id: object
    clients: dict  # user name -> MemscaleClient
    episode_ids: dict[str, list[str]] = field(default_factory=dict)  # source -> ids
    branch_id: object = None  # the branch its requests and jobs work in (None: main)

    @property
    def analyst(self):
        return self.clients["analyst"]

    def in_branch(self, name: str, branch_id) -> Org:
        """The same org and users working in branch `name` (requests carry Memscale-Branch, jobs run in it)."""
        return Org(self.name, self.id, {u: c.in_branch(name) for u, c in self.clients.items()}, branch_id=branch_id)


class Harness:
    def __init__(self, db_name: str, *, model: str, budget: int, embedder=None, settings=None, manager: str = "rules"):
        from fastapi.testclient import TestClient
        from sqlalchemy import create_engine

        from app.jobs.runner import Resources
        from app.main import create_app
        from bench.common import fresh_database

        self.settings = (settings or fresh_database(db_name)).model_copy(update={"log_level": "WARNING", "llm_model": model})
        self.admin = create_engine(self.settings.database_url)
        self.resources = Resources(self.settings, _embedder=embedder)
        self.app = create_app(self.settings, embedder=self.resources.embedder, gateway=self.resources.gateway)
        self.http = TestClient(self.app)
        self.http.__enter__()
        self.budget = budget
        self.count = self.resources.gateway.count_tokens
        self.job_stats: list[dict] = []
        self.manager = manager

    def close(self) -> None:
        self.http.__exit__(None, None, None)
        self.admin.dispose()

    def new_org(self, name: str) -> Org:
        from sqlalchemy.orm import Session

        from app.client import MemscaleClient
        from app.orgs import service as orgs

        with Session(self.admin, expire_on_commit=False) as db:
            org = orgs.create_org(db, name)
            keys = {
                "analyst": orgs.create_key(db, orgs.create_user(db, org, "analyst")),
                "steward": orgs.create_key(db, orgs.create_user(db, org, "steward", roles=["steward"])),
                "logs": orgs.create_key(db, orgs.create_user(db, org, "logs")),
            }
            db.commit()
        return Org(name, org.id, {u: MemscaleClient(base_url="", api_key=k, transport=self.http) for u, k in keys.items()})

    def ingest(self, org: Org, items: list[dict], *, user: str, source: str) -> None:
        for start in range(0, len(items), 200):
            ids = org.clients[user].create_episodes(items[start : start + 200])
            org.episode_ids.setdefault(source, []).extend(ids)

    def job(self, org: Org, kind: str, params: dict) -> dict:
        from app.jobs import service as jobs_service
        from app.jobs.runner import JobContext, run_job
        from app.kit.database.db import bind_principal

        t0 = time.perf_counter()
        with self.app.state.sessions() as db:
            bind_principal(db, None, org_id=org.id, all_scopes=True)
            j = jobs_service.create(
                db, org_id=org.id, actor_id=None, kind=kind, params=params, status="running", branch_id=org.branch_id
            )
            db.commit()
        done = run_job(
            JobContext(
                settings=self.settings, sessions=self.app.state.sessions, org_id=org.id, job_id=j.id, resources=self.resources
            )
        )
        if done.status != "succeeded":
            raise RuntimeError(f"{kind} job failed: {done.error}")
        stats = {"org": org.name, "kind": kind, "seconds": round(time.perf_counter() - t0, 1), **(done.stats or {})}
        self.job_stats.append(stats)
        return stats

    def distill(self, org: Org) -> dict:
        stats = self.job(org, "distill", {"min_age_s": 0, "batch_size": 8, **self.manager_param("distill")})
        self.consolidate(org)
        return stats

    def consolidate(self, org: Org) -> dict:
        return self.job(org, "consolidate", self.manager_param("consolidate"))

    def manager_param(self, kind: str) -> dict:
        """`{"manager": rules|learned}` when the job kind takes that parameter, else nothing (the
        job's own rules). A learned manager that no job can take is refused when the command's
        options are read, never run as the rules under another name."""
        return {"manager": self.manager} if manager_supported(kind) else {}

    def bootstrap(self, org: Org, sp: Space, glossary, *, enrich: bool = True) -> dict:
        return self.job(
            org,
            "bootstrap",
            {"schema_url": f"sqlite:///{sp.path}", "glossary": str(glossary), "visibility": "org", "enrich": enrich},
        )

    def inventory(self, org: Org) -> dict:
        from sqlalchemy import text

        with self.admin.connect() as c:
            row = c.execute(
                text(
                    "SELECT (SELECT count(*) FROM episodes WHERE org_id = :o),"
                    " (SELECT count(*) FROM memories WHERE org_id = :o AND status = 'active'),"
                    " (SELECT count(*) FROM chunks WHERE org_id = :o),"
                    " (SELECT count(*) FROM episodes WHERE org_id = :o AND quality = 'quarantined')"
                ),
                {"o": org.id},
            ).one()
        return {"episodes": row[0], "memories_active": row[1], "chunks": row[2], "episodes_quarantined": row[3]}

    def derived_from(self, org: Org, episode_ids: list[str]) -> set[str]:
        """Ids of the org's active memories distilled from any of `episode_ids` (lineage edges)."""
        from sqlalchemy import text

        if not episode_ids:
            return set()
        with self.admin.connect() as c:
            rows = c.execute(
                text(
                    "SELECT DISTINCT m.id FROM memories m JOIN lineage_edges l ON l.from_id = m.id AND l.from_type = 'memory'"
                    " WHERE m.org_id = :o AND l.to_type = 'episode' AND l.to_id = ANY(CAST(:ids AS uuid[]))"
                ),
                {"o": org.id, "ids": episode_ids},
            ).all()
        return {str(r[0]) for r in rows}


def manager_supported(kind: str) -> bool:
    """Whether the `kind` job's params declare a `manager` (the memory manager: rules or learned)."""
    from app.jobs.kinds import JOB_KINDS

    return "manager" in JOB_KINDS[kind].params.model_fields


@dataclass
class Probe:
    """What one question saw: the context (or docs), which keys it held, and the agent's run."""

    question: Question
    text: str
    tokens: int
    item_ids: set[str]
    found: set[str]
    agent: ag.AgentResult | None = None
    browse_steps: int | None = None  # navigation probes: browse calls made


def probe_memory(h: Harness, org: Org, q: Question) -> Probe:
    ctx = org.analyst.context(f"Space {q.space}. {q.text}", budget_tokens=h.budget)
    ids = {i["id"] for s in ctx["sections"] for i in s["items"] if i.get("id")}
    return Probe(q, ctx["text"], ctx["tokens"], ids, found_keys(ctx["text"], q.keys))


def browse_text(client, path: str | None) -> str:
    """What the BROWSE action shows: a table/column/section/term node in full (text, children,
    linked terms and joins), any other path as its list of children."""
    from app.client import MemscaleError
    from app.knowledge.navigation import render

    try:
        t = client.knowledge_tree(path or None)
    except MemscaleError as exc:
        return f"Error: {exc}"
    if t["node"]["kind"] in ("table", "column", "section", "term", "document"):
        return render(client.knowledge_node(t["node"]["id"]))
    kids = [f"- {c['kind']} {c['path']}" + (f" — {c['summary']}" if c.get("summary") else "") for c in t["children"]]
    return "\n".join(kids) or "(empty)"


def _words(text: str) -> set[str]:
    import re

    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 2}


def probe_browse(h: Harness, org: Org, base: Probe, *, max_open: int = 2) -> Probe:
    """The context probe plus a fixed browsing policy that reads only the question and what the
    tree shows (no generator knowledge): from the top level, open the catalog named in the
    question, its schemas, then the `max_open` tables whose name and summary share the most
    words with the question. The question is hit when its keys are in the context or in what
    was browsed, as before; steps = browse calls, tokens = context + browsed text."""
    q, client = base.question, org.analyst
    qwords = _words(f"Space {q.space}. {q.text}")
    seen, steps = [], 0

    def tree(path: str | None) -> list[dict]:
        nonlocal steps
        steps += 1
        kids = client.knowledge_tree(path)["children"]
        seen.append("\n".join(f"- {c['kind']} {c['path']}" + (f" — {c['summary']}" if c.get("summary") else "") for c in kids))
        return kids

    catalogs = [c for c in tree(None) if c["kind"] == "catalog" and _words(c["name"]) & qwords]
    tables = []
    for cat in catalogs[:1]:
        for schema in tree(cat["path"]):
            tables += [t for t in tree(schema["path"]) if t["kind"] == "table"]
    ranked = sorted(tables, key=lambda t: (-len(_words(f"{t['name']} {t.get('summary', '')}") & qwords), t["path"]))
    for t in ranked[:max_open]:
        steps += 1
        seen.append(browse_text(client, t["path"]))
    browsed = "\n".join(seen)
    text = f"{base.text}\n\n{browsed}"
    p = Probe(q, text, base.tokens + h.count(browsed), base.item_ids, found_keys(text, q.keys))
    p.browse_steps = steps
    return p


def probe_docs(h: Harness, q: Question, doc: str) -> Probe:
    return Probe(q, doc, h.count(doc), set(), found_keys(doc, q.keys))


def run_agent(
    h: Harness, org: Org | None, p: Probe, spaces: dict[str, Space], max_steps: int, *, navigation: bool = False
) -> None:
    def search(query: str) -> str:
        if org is None:
            return "(no memory in this run)"
        res = org.analyst.search(query, k=3)["results"]
        return "\n".join("- " + " ".join(r["text"].split())[:300] for r in res) or "(nothing found)"

    sp = spaces[p.question.space]
    browse = (lambda path: browse_text(org.analyst, path)) if navigation and org is not None else None
    p.agent = ag.answer(
        h.resources.gateway,
        search,
        sp.path,
        sp.name,
        p.question.text,
        p.text,
        p.question.gold,
        max_steps=max_steps,
        browse=browse,
    )


def summarise_point(
    probes: list[Probe],
    *,
    label: str,
    shards: int | None,
    inventory: dict | None = None,
    poison_ids: dict[str, set[str]] | None = None,
) -> dict:
    hits = [set(p.question.keys) <= p.found for p in probes]
    kinds: dict[str, list[float]] = {"mapping": [], "convention": []}
    for p in probes:
        for k in p.question.keys:
            kinds["convention" if k.startswith("conv:") else "mapping"].append(float(k in p.found))
    by_space: dict[str, list[float]] = {}
    for p, hit in zip(probes, hits):
        by_space.setdefault(p.question.space, []).append(float(hit))
    out = {
        "label": label,
        "shards": shards,
        "questions": len(probes),
        "hit_rate": round(mean(hits), 4),
        "key_recall": round(mean(len(p.found) / len(p.question.keys) for p in probes), 4),
        "mapping_keys_found": round(mean(kinds["mapping"]), 4) if kinds["mapping"] else None,
        "convention_keys_found": round(mean(kinds["convention"]), 4) if kinds["convention"] else None,
        "hit_rate_by_space": {s: round(mean(v), 4) for s, v in sorted(by_space.items())},
        "context_tokens_mean": round(mean(p.tokens for p in probes), 1),
    }
    if any(p.browse_steps is not None for p in probes):
        out["browse_steps_mean"] = round(mean(p.browse_steps or 0 for p in probes), 2)
    ran = [p.agent for p in probes if p.agent is not None]
    out["agent"] = (
        {
            "questions": len(ran),
            "execution_accuracy": round(mean(float(a.correct) for a in ran), 4),
            "mean_steps": round(mean(a.steps for a in ran), 3),
            "sql_ran": round(mean(float(a.sql is not None) for a in ran), 4),
            "prompt_tokens_mean": round(mean(a.prompt_tokens for a in ran), 1),
        }
        if ran
        else None
    )
    if inventory is not None:
        out["memory"] = inventory
    if poison_ids is not None:  # share of questions whose context held a poisoned item (or one derived from it)
        every = set().union(*poison_ids.values()) if poison_ids else set()
        out["poison_exposure"] = round(mean(float(bool(p.item_ids & every)) for p in probes), 4)
        out["poison_exposure_by_type"] = {
            t: round(mean(float(bool(p.item_ids & ids)) for p in probes), 4) for t, ids in sorted(poison_ids.items())
        }
    return out


def agent_traces(probes: list[Probe], label: str) -> list[dict]:
    return [
        {
            "point": label,
            "question": p.question.text,
            "space": p.question.space,
            "correct": p.agent.correct,
            "steps": p.agent.steps,
            "sql": p.agent.sql,
            "trace": p.agent.trace,
        }
        for p in probes
        if p.agent is not None
    ]


def attainable(tests: list[Question], spaces: dict[str, Space], k: int, parts: int) -> float:
    """Share of questions a bootstrap of k shards can hit at all: every key's marker must be in
    the bootstrapped sources. Conventions and the cancelled-exclusion filter (`<status> <> 'X'`)
    are in no schema or glossary (spaces.py), and glossary row i arrives with part i % parts + 1
    (spaces.write_glossary), so a mapping key needs its row in the first k parts; the join is in
    the schema's foreign key either way. An upper bound for every bootstrap curve."""
    if k == 0:
        return 0.0
    row_of = {"measure": 2, "date": 3, "cancelled": 5}

    def reachable(q: Question, key: str) -> bool:
        name = key.split(":")
        if key.startswith("conv:") or name[-1] == "net":
            return False
        if name[-1] == "join":
            return True
        sp = spaces[q.space]
        if name[1] == "region":
            row = 6 + list(sp.region_code).index(name[2])
        elif name[1] == "segment":
            row = 6 + len(sp.region_code) + list(sp.segment_code).index(name[2])
        else:
            row = row_of[name[1]]
        return row % parts < k

    return round(mean(float(all(reachable(q, key) for key in q.keys)) for q in tests), 4)
