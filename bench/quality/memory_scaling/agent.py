"""The analytics agent: any litellm model through the project's gateway, given /v1/context, with
three tools (search memory, list tables, run SQL) and a step limit.

Protocol (kept to plain text so that a 135M model can follow it): each model turn is one action,
``SQL: <query>``, ``SEARCH: <words>`` or ``TABLES`` (and ``BROWSE <path>``, the knowledge tree, in
the navigation runs). Parsing is forgiving: JSON tool calls
(``{"tool": "run_sql", "sql": ...}``), fenced ```sql blocks, and a bare SELECT anywhere in the reply
are all read as actions; anything else costs a step and gets a reminder of the format.

The run ends at the first SQL query that executes: its result is the answer (execution accuracy
compares it with the gold result as a multiset, floats to 2 decimals). Steps = model calls used.
A query that fails shows the model its error and the loop goes on, up to ``max_steps``.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

SYSTEM = (
    "You are a data analyst. Answer the question with one SQLite query over the space's database. "
    "Reply with exactly one action per turn:\n"
    "SQL: <one SQLite query>   (runs it; a query that runs is your final answer)\n"
    "SEARCH: <words>           (searches the team's memory)\n"
    "TABLES                    (lists tables and columns)\n"
    "Table and column names are opaque codes: copy them from the memory below. If the memory has SQL for a "
    "similar question in the same space, adapt that SQL."
)
FORMAT_REMINDER = "Reply with one line starting with SQL:, SEARCH: or TABLES."
BROWSE_LINE = "BROWSE <path>             (the knowledge tree: empty path = databases; then schema, table)\n"
BROWSE_REMINDER = "Reply with one line starting with SQL:, SEARCH:, BROWSE or TABLES."
MAX_ROWS = 10
_ACTION = re.compile(
    r"^\s*[`*#>\-\s]*(SQL|FINAL|ANSWER|QUERY|SEARCH|BROWSE|TABLES|LIST[_ ]TABLES)\b\s*[:=\-]?\s*(.*)$", re.I | re.M | re.S
)
_FENCE = re.compile(r"```(?:sql|sqlite)?\s*(.*?)```", re.I | re.S)
_SELECT = re.compile(r"\b((?:SELECT|WITH)\b.*)", re.I | re.S)


@dataclass
class Action:
    kind: str  # "sql" | "search" | "browse" | "tables" | "invalid"
    arg: str = ""


def clean_sql(text: str) -> str:
    """One statement: up to the first ';', a blank line, or a line that starts another action."""
    text = _FENCE.sub(lambda m: m.group(1), text).strip().strip("`")
    text = re.split(
        r";|\n\s*\n|\n\s*(?:(?:SQL|SEARCH|TABLES|Observation|Question|Action|Feedback|Result|Ran)\b|- )",
        text,
        maxsplit=1,
        flags=re.I,
    )[0]
    return " ".join(text.split())


def parse_action(reply: str) -> Action:
    text = (reply or "").strip()
    if not text:
        return Action("invalid")
    blob = re.search(r"\{.*\}", text, re.S)
    if blob:
        try:
            obj = json.loads(blob.group(0))
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            name = str(obj.get("tool") or obj.get("action") or obj.get("name") or "").lower()
            args = obj.get("arguments") if isinstance(obj.get("arguments"), dict) else obj
            arg = str(args.get("sql") or args.get("query") or args.get("input") or args.get("text") or "")
            if "table" in name:
                return Action("tables")
            if "search" in name or "memory" in name:
                return Action("search", arg)
            if arg and ("sql" in name or _SELECT.search(arg)):
                return Action("sql", clean_sql(arg))
    m = _ACTION.search(text)
    if m:
        word, rest = m.group(1).upper(), m.group(2)
        if word.startswith("TABLES") or word.startswith("LIST"):
            return Action("tables")
        if word == "SEARCH":
            return Action("search", rest.strip().splitlines()[0][:200] if rest.strip() else "")
        if word == "BROWSE":
            return Action("browse", rest.strip().splitlines()[0].strip(" `'\"")[:300] if rest.strip() else "")
        sql = clean_sql(rest)
        if _SELECT.match(sql):
            return Action("sql", sql)
    fenced = _FENCE.search(text)
    if fenced and _SELECT.search(fenced.group(1)):
        return Action("sql", clean_sql(_SELECT.search(fenced.group(1)).group(1)))
    bare = _SELECT.search(text)
    if bare:
        return Action("sql", clean_sql(bare.group(1)))
    anywhere = re.search(r"\bSEARCH\s*:\s*(.+)", text, re.I)
    if anywhere:
        return Action("search", anywhere.group(1).strip().splitlines()[0][:200])
    if re.search(r"\b(list[_ ]?tables|TABLES)\b", text, re.I):
        return Action("tables")
    return Action("invalid")


def run_sql(path: Path, sql: str, *, timeout_s: float = 2.0) -> tuple[list[tuple] | None, str]:
    """Read-only execution with a time limit; (rows, "") or (None, error)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    deadline = time.monotonic() + timeout_s
    db.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
    try:
        return db.execute(sql).fetchmany(200), ""
    except (sqlite3.Error, sqlite3.Warning, ValueError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    finally:
        db.close()


def same_result(a: list[tuple] | None, b: list[tuple]) -> bool:
    def canon(rows: list[tuple]) -> list[tuple]:
        return sorted((tuple(round(v, 2) if isinstance(v, float) else v for v in r) for r in rows), key=repr)

    return a is not None and canon(a) == canon(b)


def list_tables(path: Path) -> str:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return "\n".join(f"{n}({', '.join(r[1] for r in db.execute(f'PRAGMA table_info({n})'))})" for n in names)


@dataclass
class AgentResult:
    correct: bool
    steps: int
    sql: str | None
    prompt_tokens: int  # largest prompt of the run
    trace: list[dict] = field(default_factory=list)


def answer(
    gateway,
    search,
    db_path: Path,
    space: str,
    question: str,
    context: str,
    gold: list[tuple],
    *,
    max_steps: int = 3,
    max_tokens: int = 200,
    browse=None,
) -> AgentResult:
    """`search(query) -> str` is the memory-search tool; `context` is /v1/context text (or docs);
    `browse(path) -> str`, when given, adds the BROWSE action (the knowledge tree)."""
    from app.llm.base import LLMError

    system = (
        SYSTEM.replace("TABLES                    (lists", BROWSE_LINE + "TABLES                    (lists") if browse else SYSTEM
    )
    reminder = BROWSE_REMINDER if browse else FORMAT_REMINDER
    intro = (f"{context}\n\n" if context else "(no memory)\n\n") + f"Space: {space}\nQuestion: {question}\nAction:"
    messages = [{"role": "system", "content": system}, {"role": "user", "content": intro}]
    trace, biggest = [], 0
    for step in range(1, max_steps + 1):
        biggest = max(biggest, sum(gateway.count_tokens(m["content"]) for m in messages))
        try:
            reply = gateway.chat(messages, max_tokens=max_tokens, stop=["Observation:"])
        except LLMError as exc:
            trace.append({"step": step, "error": str(exc)[:200]})
            break
        act = parse_action(reply)
        if act.kind == "browse" and browse is None:  # not offered: read the reply as before BROWSE existed
            act = parse_action(re.sub(r"\bBROWSE\b", "", reply, flags=re.I))
        obs = reminder
        if act.kind == "sql":
            rows, err = run_sql(db_path, act.arg)
            trace.append({"step": step, "action": "sql", "sql": act.arg, "error": err or None})
            if rows is not None:
                return AgentResult(same_result(rows, gold), step, act.arg, biggest, trace)
            obs = f"Error: {err}"
        elif act.kind == "search":
            obs = search(act.arg or question)
            trace.append({"step": step, "action": "search", "query": act.arg})
        elif act.kind == "browse" and browse is not None:
            obs = browse(act.arg)
            trace.append({"step": step, "action": "browse", "path": act.arg})
        elif act.kind == "tables":
            obs = list_tables(db_path)
            trace.append({"step": step, "action": "tables"})
        else:
            trace.append({"step": step, "action": "invalid", "reply": reply[:120]})
        messages += [
            {"role": "assistant", "content": reply.strip()[:600] or "(nothing)"},
            {"role": "user", "content": f"Observation: {obs[:1200]}\nAction:"},
        ]
    return AgentResult(False, max_steps, None, biggest, trace)
