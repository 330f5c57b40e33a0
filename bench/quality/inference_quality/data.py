"""Examples for the inference-quality benchmark: ~2k-token multi-chunk contexts, a question, a gold answer.

Two corpora of different texture, interleaved (wiki, locomo, wiki, ...) so that any prefix of the
list is balanced:
- ``wiki``: the facilities wikis of ``bench/speed/inference_blend/dataset.py`` (6-10 chunks of ~200-330
  tokens; the answer needs one value from each of 2-3 chunks).
- ``locomo``: LoCoMo conversations (the LoCoMo data folder, ``DEFAULT`` in bench/quality/locomo/data.py).
  For a question whose evidence lies in one session (categories 1 single-hop, 2 temporal, 4
  open-domain; adversarial 5 excluded), the
  context is that session cut into chunks of whole turns (≤ ~260 tokens, each headed by the
  session date) plus chunks of other sessions of the same conversation as distractors, ~2k tokens
  in all, in a seeded random order. Turns are written ``Name: text``.
Deterministic given the seed.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from bench.common import ROOT
from bench.speed.inference_blend.dataset import build as build_wiki

LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev.json"
CHUNK_WORDS = 170  # ~260 SmolLM2 tokens of chat text
CONTEXT_WORDS = 1300  # ~2k tokens


@dataclass
class Example:
    id: str
    corpus: str  # "wiki" | "locomo"
    chunks: list[str]
    question: str
    gold: str


def _session_chunks(conv: dict, s: int) -> list[str]:
    date = conv.get(f"session_{s}_date_time", "")
    chunks, cur, words = [], [], 0
    for turn in conv[f"session_{s}"]:
        line = f"{turn['speaker']}: {turn['text']}"
        n = len(line.split())
        if cur and words + n > CHUNK_WORDS:
            chunks.append(cur)
            cur, words = [], 0
        cur.append(line)
        words += n
    if cur:
        chunks.append(cur)
    return [f"Conversation on {date}:\n" + "\n".join(c) for c in chunks]


def build_locomo(n: int, seed: int = 11, path: Path = LOCOMO) -> list[Example]:
    convs = json.loads(path.read_text())
    rng = random.Random(seed)
    pool = []
    for ci, c in enumerate(convs):
        conv = c["conversation"]
        for qi, q in enumerate(c["qa"]):
            if q.get("category") not in (1, 2, 4) or q.get("answer") in (None, ""):
                continue
            sessions = {e.split(":")[0] for e in q.get("evidence") or []}
            if len(sessions) != 1:
                continue
            s = int(next(iter(sessions))[1:])
            if f"session_{s}" not in conv:
                continue
            pool.append((ci, qi, s))
    rng.shuffle(pool)
    out = []
    for ci, qi, s in pool:
        if len(out) == n:
            break
        conv, q = convs[ci]["conversation"], convs[ci]["qa"][qi]
        evidence = _session_chunks(conv, s)
        words = sum(len(x.split()) for x in evidence)
        if words > CONTEXT_WORDS:
            continue  # one session filling the whole context leaves nothing to blend around
        others = [k for k in range(1, 40) if k != s and f"session_{k}" in conv and conv[f"session_{k}"]]
        rng.shuffle(others)
        distractors = []
        for k in others:
            for ch in _session_chunks(conv, k):
                if words + len(ch.split()) > CONTEXT_WORDS:
                    break
                distractors.append(ch)
                words += len(ch.split())
            if words > CONTEXT_WORDS - CHUNK_WORDS // 2:
                break
        chunks = distractors + evidence
        order = list(range(len(chunks)))
        rng.shuffle(order)
        out.append(
            Example(
                f"locomo-{convs[ci]['sample_id']}-{qi}", "locomo", [chunks[i] for i in order], q["question"], str(q["answer"])
            )
        )
    if len(out) < n:
        raise ValueError(f"only {len(out)} LoCoMo questions fit the context budget, {n} asked")
    return out


def build(n: int, seed: int = 7) -> list[Example]:
    """``n`` examples, alternately wiki and LoCoMo (wiki first)."""
    n_wiki, n_locomo = (n + 1) // 2, n // 2
    wiki = [Example(e.id, "wiki", e.chunks, e.question, e.gold) for e in build_wiki(n_wiki, seed=seed)]
    locomo = build_locomo(n_locomo, seed=seed + 4) if n_locomo else []
    out = []
    for i in range(max(len(wiki), len(locomo))):
        out += wiki[i : i + 1] + locomo[i : i + 1]
    return out
