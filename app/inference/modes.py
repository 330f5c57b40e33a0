"""The one table of context modes of the inference tier: how the KV of retrieved chunks is put in
front of the prompt. The wire format's `mode` enum (schemas.py) and the engine's dispatch read it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class ContextMode:
    name: str
    stored_kv: bool  # reads the chunks' stored KV (else prefills their tokens)
    doc: str


MODES: dict[str, ContextMode] = {
    m.name: m
    for m in (
        ContextMode("blend", True, "CacheBlend: stored KVs re-rotated, the most deviating tokens recomputed"),
        ContextMode("full", False, "every chunk prefilled: the reference the others are checked against"),
        ContextMode("prefix", True, "the first chunk's stored KV reused, the rest prefilled"),
        ContextMode("reuse", True, "every chunk's stored KV reused unchanged (re-rotated to its place)"),
    )
}
MODE_NAMES = tuple(MODES)
Mode = Literal[MODE_NAMES]
