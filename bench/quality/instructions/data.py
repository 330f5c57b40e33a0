"""The labelled instruction set (labelled.txt): parsing and the dev / held-out split.

Pairs alternate dev / held-out in file order, so both halves cover every category (the file is
grouped by category). The dev half is what the interpreter was tuned on; the held-out half is
scored only for the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

PATH = Path(__file__).with_name("labelled.txt")
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)  # the set's reference instant (a Monday)
LIST_FIELDS = (
    "kinds",
    "exclude_kinds",
    "labels",
    "exclude_labels",
    "visibility",
    "groups",
    "asset_kinds",
    "status",
    "source",
    "terms",
)
SCALAR_FIELDS = ("since", "until", "owner")
FIELDS = LIST_FIELDS + SCALAR_FIELDS + ("ignored",)


@dataclass(frozen=True)
class Pair:
    n: int
    split: str  # "dev" | "heldout"
    instruction: str
    expected: dict  # every field of FIELDS: a sorted tuple, a string, a bool or None


def parse_expected(spec: str) -> dict:
    out: dict = {f: None for f in FIELDS}
    out["ignored"] = False
    for part in (p.strip() for p in spec.split(";") if p.strip()):
        key, _, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if key not in FIELDS:
            raise ValueError(f"unknown field {key!r} in {spec!r}")
        if key == "ignored":
            out[key] = value == "yes"
        elif key in LIST_FIELDS:
            out[key] = tuple(sorted(v.strip().lower() for v in value.split(",") if v.strip()))
        else:
            out[key] = value
    return out


def load(path: Path = PATH) -> list[Pair]:
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        instruction, _, spec = line.partition(" | ")
        n = len(pairs)
        pairs.append(Pair(n, "dev" if n % 2 == 0 else "heldout", instruction.strip(), parse_expected(spec)))
    return pairs
