"""Labelled traces for the distillation benchmark, written by hand before the pipeline was tuned.

Each *lesson family* is one piece of knowledge an enterprise agent should keep (a rule, a
preference, a fact about a person or system, a data convention, the fix a trajectory found, a
correction of the agent), told in several traces with different wording, speakers, trace kinds
and visibility. ``keys`` are the values a memory must keep to state the lesson: every group
(alternatives separated by ``|``) must occur in the memory text, case-insensitively.

Chatter traces (greetings, thanks, meta talk, transient status, questions, general knowledge,
cue words used without a lesson) hold nothing; any memory from them is a false positive.

Split: whole families (and chatter items) are either ``dev`` or ``test``, so a phrasing tuned on
dev never reappears in test with the same lesson. Tune on dev; report on test.

The families of rules, preferences, facts and conventions, and the traces that state two lessons,
are data in ``families.json`` beside this module (one trace per line); trajectories, corrections
and chatter are in their own modules. This module turns them into ``LESSONS`` and ``TRACES``.

Users of the benchmark org: alice (group finance), bob (group eng), carol (finance, eng),
dave (no group).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from bench.quality.distillation.chatter import CHATTER
from bench.quality.distillation.corrections import CORRECTIONS
from bench.quality.distillation.trajectories import TRAJECTORIES

USERS = {"alice": ("finance",), "bob": ("eng",), "carol": ("finance", "eng"), "dave": ()}


@dataclass(frozen=True)
class Trace:
    id: str
    split: str  # dev | test
    category: str  # rule | preference | fact | convention | trajectory | correction | chatter
    kind: str  # conversation | trajectory | note | feedback
    owner: str
    visibility: str  # private | group | org
    groups: tuple[str, ...]
    content: str
    outcome: str | None = None
    lessons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Lesson:
    id: str
    keys: tuple[str, ...]  # each: alternatives separated by "|"
    split: str
    category: str


@dataclass
class _Fam:
    lesson: Lesson
    traces: list[tuple] = field(default_factory=list)


LESSONS: dict[str, Lesson] = {}
TRACES: list[Trace] = []
_FILE = json.loads(Path(__file__).with_name("families.json").read_text(encoding="utf-8"))


def _fam(lid: str, keys: tuple[str, ...], split: str, category: str, *traces: tuple) -> None:
    """traces: (kind, owner, visibility, content[, outcome[, groups[, extra lesson ids]]])."""
    LESSONS[lid] = Lesson(lid, keys, split, category)
    for i, t in enumerate(traces):
        kind, owner, vis, content = t[:4]
        outcome = t[4] if len(t) > 4 else None
        groups = t[5] if len(t) > 5 else ()
        extra = t[6] if len(t) > 6 else ()
        if vis == "group" and not groups:
            groups = USERS[owner][:1]
        cat = "trajectory" if kind == "trajectory" else category
        TRACES.append(Trace(f"{lid}-{i + 1}", split, cat, kind, owner, vis, tuple(groups), content, outcome, (lid, *extra)))


def _row(t: dict) -> tuple:
    """A trace of families.json as the tuple `_fam` takes (``groups``: default, the owner's first
    group for ``group`` visibility; ``also``: further lessons the trace states)."""
    return (
        t["kind"],
        t["owner"],
        t["visibility"],
        t["content"],
        t.get("outcome"),
        tuple(t.get("groups", ())),
        tuple(t.get("also", ())),
    )


# -- rules, preferences, facts and conventions (families.json) -----------------------------------

for _f in _FILE["families"]:
    _fam(_f["id"], tuple(_f["keys"]), _f["split"], _f["category"], *(_row(t) for t in _f["traces"]))

# -- tool trajectories whose fix is the lesson ---------------------------------------------------

for _args in TRAJECTORIES:
    _fam(*_args)

# -- corrections of the agent -------------------------------------------------------------------

for _args in CORRECTIONS:
    _fam(*_args)

# -- two lessons in one trace -----------------------------------------------------------------

for _t in _FILE["multi"]:
    TRACES.append(
        Trace(
            _t["id"],
            _t["split"],
            _t["category"],
            _t["kind"],
            _t["owner"],
            _t["visibility"],
            tuple(_t.get("groups", ())),
            _t["content"],
            _t.get("outcome"),
            tuple(_t["lessons"]),
        )
    )

# -- chatter, meta talk and cue words without a lesson ------------------------------------------

for i, t in enumerate(CHATTER):
    kind, owner, vis, content = t[:4]
    outcome = t[4] if len(t) > 4 else None
    groups = USERS[owner][:1] if vis == "group" else ()
    TRACES.append(
        Trace(f"chat-{i + 1}", "dev" if i % 2 == 0 else "test", "chatter", kind, owner, vis, groups, content, outcome, ())
    )


def split(name: str) -> list[Trace]:
    """``dev``, ``test``, ``all`` (dev + test), ``fresh`` (fresh.py: written after tuning, then used
    to fix generic faults) ``holdout`` / ``holdout2`` (written after the tuning rounds before them; see their docstrings)."""
    if name == "fresh":
        from bench.quality.distillation.fresh import FRESH

        return list(FRESH)
    if name == "holdout":
        from bench.quality.distillation.holdout import HOLDOUT

        return list(HOLDOUT)
    if name == "holdout2":
        from bench.quality.distillation.holdout2 import HOLDOUT2

        return list(HOLDOUT2)
    return [t for t in TRACES if name == "all" or t.split == name]


def _check() -> None:
    ids = [t.id for t in TRACES]
    assert len(ids) == len(set(ids)), "duplicate trace ids"
    for t in TRACES:
        for lid in t.lessons:
            assert LESSONS[lid].split == t.split, f"{t.id}: lesson {lid} is in another split"
        assert t.visibility in ("private", "group", "org") and (t.visibility != "group" or t.groups)


_check()
