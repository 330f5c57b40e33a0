"""Set-up, ingestion and the retrieval methods of the LoCoMo bench.

One org, one user per conversation (each conversation is private to its user), every turn an
episode (``kind=conversation``, ``session_id`` = conversation + session, ``occurred_at`` = the
session's date plus the turn's index in seconds, ``metadata.dia_id``). Returned episode ids map
back to dia_ids through the ids the batch call returned.

Methods, each answering "which turns does the reader see":
- ``context``: POST /v1/context at ``budget`` tokens; the reader gets its text; ranked = its items by score.
- ``vector`` / ``text`` / ``hybrid``: POST /v1/search (types=[episode]) top-k turns (RAG).
- ``full``: the whole conversation, cut from the start to the reader's window.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta

from bench.quality.locomo.data import QA, Conversation, Turn

SEARCH_DEPTH = 50  # search results fetched once per question; recall@k reads prefixes of them
RAG_K = 10  # turns a RAG baseline hands to the reader


@dataclass
class Retrieved:
    ranked: list[str]  # dia_ids in rank order (empty for `full`, which has no ranking)
    in_context: set[str]  # dia_ids of every turn the reader is given
    excerpts: str  # the reader's view
    tokens: int  # tokens of what the reader is given
    latency_s: float
    service_tokens: int | None = None  # /v1/context's own count of its rendered text
    extra: dict = field(default_factory=dict)


def date_str(t: Turn) -> str:
    return t.at.strftime("%-d %B %Y") if t.at else "undated"


def excerpt_lines(turns: list[Turn]) -> str:
    """Chronological, grouped by session under a dated header (the same layout as the full context);
    the date is each episode's occurred_at, which a client reads back from the service."""
    lines, session = [], None
    for t in sorted(turns, key=lambda t: (t.session, _turn_no(t.dia_id))):
        if t.session != session:
            session = t.session
            lines.append(f"Session {t.session} ({date_str(t)}):")
        lines.append(t.text)
    return "\n".join(lines)


def turn_items(conv: Conversation) -> list[dict]:
    """A conversation's turns as episodes (private to its user, one session id per session)."""
    return [
        {
            "kind": "conversation",
            "content": t.text,
            "session_id": f"{conv.sample_id}-s{t.session}",
            "occurred_at": (t.at + timedelta(seconds=i)).isoformat() + "Z" if t.at else None,
            "metadata": {"dia_id": t.dia_id, "session": t.session, "session_date": date_str(t)},
            "visibility": "private",
        }
        for i, t in enumerate(conv.turns)
    ]


def _turn_no(dia_id: str) -> int:
    try:
        return int(dia_id.split(":")[1])
    except (IndexError, ValueError):
        return 0


def quick_slice(conv: Conversation, sessions: int, max_questions: int) -> Conversation:
    """The first `sessions` sessions of a conversation and the questions answerable inside them."""
    turns = [t for t in conv.turns if t.session <= sessions]
    known = {t.dia_id for t in turns}
    qa = [q for q in conv.qa if all(e in known for e in q.evidence)][:max_questions]
    return Conversation(conv.sample_id, turns, qa)


class Service:
    """The API in-process (FastAPI TestClient), one typed client per conversation's user."""

    def __init__(self, db_name: str, convs: list[Conversation], *, model: str, embedder=None):
        from fastapi.testclient import TestClient
        from sqlalchemy import create_engine
        from sqlalchemy.orm import Session

        from app.client import MemscaleClient
        from app.jobs.runner import Resources
        from app.kit.runtime import wordvectors
        from app.main import create_app
        from app.orgs import service as orgs
        from bench.common import fresh_database

        self.settings = fresh_database(db_name).model_copy(
            update={"log_level": "WARNING", "max_batch_items": 2000, "max_body_bytes": 8_000_000, "llm_model": model}
        )
        admin = create_engine(self.settings.database_url)
        with Session(admin, expire_on_commit=False) as db:
            self.org = orgs.create_org(db, "locomo")
            keys = {c.sample_id: orgs.create_key(db, orgs.create_user(db, self.org, c.sample_id)) for c in convs}
            db.commit()
        admin.dispose()
        self.resources = Resources(self.settings, _embedder=embedder)
        wordvectors.ensure(self.resources.embedder, say=print)  # as `memscale serve` does, before any write
        self.app = create_app(self.settings, embedder=self.resources.embedder)
        self.http = TestClient(self.app)
        self.http.__enter__()
        self.clients = {sid: MemscaleClient(base_url="", api_key=k, transport=self.http) for sid, k in keys.items()}
        self.turn_of: dict[str, Turn] = {}  # episode id -> turn
        self._memory_sources: dict[str, list[str]] = {}

    def close(self) -> None:
        self.http.__exit__(None, None, None)

    @property
    def count(self):
        return self.resources.gateway.count_tokens

    def ingest(self, conv: Conversation) -> None:
        ids = self.clients[conv.sample_id].create_episodes(turn_items(conv))
        self.turn_of.update({str(i): t for i, t in zip(ids, conv.turns)})

    def settle(self) -> None:
        """ANALYZE the database after the bulk ingest, as autovacuum does on its own within about
        a minute of a load this size. Measured right after a 2,760-turn load without it, the
        planner still had the near-empty table's statistics and probed every neighbour lookup
        through the user's whole visibility bitmap: 23 ms of a search's 40 ms in the database
        (6.7 ms once analysed; docs/decisions.md, seventh stop)."""
        from sqlalchemy import create_engine, text

        eng = create_engine(self.settings.database_url, isolation_level="AUTOCOMMIT")
        with eng.connect() as c:
            c.execute(text("ANALYZE"))
        eng.dispose()

    def distill(self) -> dict:
        """Run the real distill job (operator run) over everything ingested; returns its stats."""
        from app.jobs import service as jobs_service
        from app.jobs.runner import JobContext, run_job
        from app.kit.database.db import bind_principal

        with self.app.state.sessions() as db:
            bind_principal(db, None, org_id=self.org.id, all_scopes=True)
            job = jobs_service.create(
                db, org_id=self.org.id, actor_id=None, kind="distill", params={"min_age_s": 0, "batch_size": 8}, status="running"
            )
            db.commit()
        done = run_job(
            JobContext(
                settings=self.settings,
                sessions=self.app.state.sessions,
                org_id=self.org.id,
                job_id=job.id,
                resources=self.resources,
            )
        )
        return {"status": done.status, "error": done.error, **(done.stats or {})}

    def _memory_turns(self, conv: Conversation, memory_id: str) -> list[str]:
        """A distilled memory counts for the turns it cites (its provenance)."""
        if memory_id not in self._memory_sources:
            m = self.clients[conv.sample_id].get_memory(memory_id)
            ids = [s["id"] for s in m.get("provenance", {}).get("sources", []) if s.get("type") == "episode"]
            self._memory_sources[memory_id] = [self.turn_of[i].dia_id for i in ids if i in self.turn_of]
        return self._memory_sources[memory_id]

    # -- methods ---------------------------------------------------------------------------

    def context(self, conv: Conversation, q: QA, budget: int) -> Retrieved:
        """The reader is given the service's own rendered context (dated turns, grouped by session);
        the ranking for recall@k is the items' scores (a section lists its turns in time order)."""
        t0 = time.perf_counter()
        ctx = self.clients[conv.sample_id].context(q.question, budget_tokens=budget)
        latency = time.perf_counter() - t0
        items = sorted((i for s in ctx["sections"] for i in s["items"]), key=lambda i: -i.get("score", 0.0))
        ranked, memories = [], 0
        for item in items:
            if item["type"] == "episode" and item["id"] in self.turn_of:
                ranked.append(self.turn_of[item["id"]].dia_id)
            elif item["type"] == "memory":
                memories += 1
                ranked += [d for d in self._memory_turns(conv, item["id"]) if d not in ranked]
        return Retrieved(
            ranked, set(ranked), ctx["text"], ctx["tokens"], latency, service_tokens=ctx["tokens"], extra={"memories": memories}
        )

    def search(self, conv: Conversation, q: QA, mode: str) -> Retrieved:
        t0 = time.perf_counter()
        res = self.clients[conv.sample_id].search(q.question, k=SEARCH_DEPTH, mode=mode, types=["episode"])
        latency = time.perf_counter() - t0
        turns = [self.turn_of[r["id"]] for r in res["results"] if r["id"] in self.turn_of]
        given = turns[:RAG_K]
        excerpts = excerpt_lines(given)
        return Retrieved([t.dia_id for t in turns], {t.dia_id for t in given}, excerpts, self.count(excerpts), latency)


class FullContext:
    """The whole conversation with session headers, cut from the start to fit `window` tokens."""

    def __init__(self, conv: Conversation, count, window: int):
        blocks: list[tuple[str, str | None]] = []
        session = None
        for t in conv.turns:
            if t.session != session:
                session = t.session
                blocks.append((f"Session {t.session} ({date_str(t)}):", None))
            blocks.append((t.text, t.dia_id))
        costs = [count(line) + 1 for line, _ in blocks]
        self.total_tokens = sum(costs)
        kept, used = [], 0
        for (line, dia), cost in zip(reversed(blocks), reversed(costs)):
            if used + cost > window:
                break
            kept.append((line, dia))
            used += cost
        kept.reverse()
        self.excerpts = "\n".join(line for line, _ in kept)
        self.in_context = {dia for _, dia in kept if dia}
        self.tokens = used

    def retrieved(self) -> Retrieved:
        return Retrieved([], self.in_context, self.excerpts, self.tokens, 0.0)


def model_window(settings, gateway) -> int:
    """The reader's context window in tokens (config of the local model; litellm's table otherwise)."""
    if gateway.is_local:
        import json

        from app.kit.runtime.localmodel import local_model_dir

        cfg = json.loads((local_model_dir(settings.data_dir) / "config.json").read_text())
        return int(cfg.get("max_position_embeddings", 2048))
    try:
        info = gateway._lib().get_model_info(gateway.model)
        return int(info.get("max_input_tokens") or 8192)
    except Exception:
        return 8192
