"""LoCoMo dev split: loading, evidence-id cleaning and turn text, per the data README's conventions."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[4] / "shared" / "data" / "locomo" / "locomo_dev.json"


@dataclass
class Turn:
    dia_id: str
    speaker: str
    text: str
    at: datetime | None
    session: int


@dataclass
class QA:
    question: str
    answer: str
    category: int
    evidence: list[str]


@dataclass
class Conversation:
    sample_id: str
    turns: list[Turn]
    qa: list[QA]


def _date(s: str | None) -> datetime | None:
    if not s:
        return None
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"):
        try:
            return datetime.strptime(s.strip(), fmt)
        except ValueError:
            continue
    return None


def turn_text(t: dict) -> str:
    text = f"{t['speaker']}: {t['text']}"
    if t.get("blip_caption"):
        text += f" [shared an image: {t['blip_caption']}]"
    return text


def clean_evidence(raw: list[str], known: set[str]) -> list[str]:
    out = []
    for entry in raw:
        for tok in re.split(r"[;, ]+", entry):
            tok = re.sub(r"^D:(\d+)", r"D\1", tok.strip())
            if tok in known and tok not in out:
                out.append(tok)
    return out


def load(path: str | Path = DEFAULT) -> list[Conversation]:
    data = json.loads(Path(path).read_text())
    convs = []
    for item in data:
        c = item["conversation"]
        turns = []
        n = 1
        while f"session_{n}" in c:
            at = _date(c.get(f"session_{n}_date_time"))
            turns += [Turn(t["dia_id"], t["speaker"], turn_text(t), at, n) for t in c[f"session_{n}"]]
            n += 1
        known = {t.dia_id for t in turns}
        qa = []
        for q in item["qa"]:
            if q.get("category") == 5:
                continue
            ev = clean_evidence(q.get("evidence", []), known)
            if ev:
                qa.append(QA(q["question"], str(q.get("answer", "")), int(q["category"]), ev))
        convs.append(Conversation(item["sample_id"], turns, qa))
    return convs
