"""The optional LLM reading of an instruction (`MEMSCALE_INSTRUCTION_LLM=true`): it reads only
what the deterministic reading (app/search/instruction.py) could not place, and fills only the
fields that reading left unset.

- No call when the rules placed every word (no left-over query words): there is nothing for
  the model to read, and the call would cost seconds on the bundled model.
- The prompt names the left-over words and, compactly, only the unset fields with their allowed
  values (generated from SearchFilters), not the whole JSON schema (~1,500 tokens, which the 135M
  model on two CPU cores needed minutes to read), after two worked turns (`SHOTS`): told in
  words what to answer, the 135M model wrote prose every time; shown two answers, it writes
  JSON. The answer is bounded to `MAX_TOKENS`.
- The answer must validate against a model generated from SearchFilters with only those
  fields (extra fields forbidden), or it is dropped whole, never half-used.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from functools import lru_cache
from typing import get_args

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from app.search.instruction import build_filters, interpret, set_fields
from app.search.schemas import SearchFilters

log = logging.getLogger("memscale.instruction")

MAX_TOKENS = 40  # the longest useful answer, e.g. {"kinds": ["procedure"], "since": "2026-07-01"}, is ~20
KINDS = "rule|fact|preference|procedure|schema_hint|conversation|trajectory|feedback|note"
ASKED = (
    "kinds",
    "exclude_kinds",
    "labels",
    "exclude_labels",
    "since",
    "until",
    "owner",
    "visibility",
    "groups",
    "asset_kinds",
    "status",
    "source",
)  # every SearchFilters field an instruction may set (not session_id)
LLM_PROMPT = "Filters: {fields}\nInstruction: {instruction}\nToday: {today}. Words left: {words}. JSON:"
SHOTS = [  # a worked pair of turns before the real one: the 135M model copies a shape, not a description
    ("drafts tagged pii from me", ["tagged", "pii"], ("labels", "since", "owner"), '{"labels": ["pii"]}'),
    ("only billing rules", ["billing"], ("labels", "since", "owner"), "{}"),
]


def _literals(annotation) -> list[str]:
    return [annotation] if isinstance(annotation, str) else [v for a in get_args(annotation) for v in _literals(a)]


def _values(name: str) -> str:
    """Allowed values of a field, from SearchFilters' annotation (its literals), else a shape."""
    if name in ("since", "until"):
        return "YYYY-MM-DD"
    literals = _literals(SearchFilters.model_fields[name].annotation)
    if name in ("kinds", "exclude_kinds"):
        literals = KINDS.split("|")
    if name == "owner":
        return "|".join(literals)
    return f"[{'|'.join(literals)}]" if literals else "[words]"


@lru_cache(maxsize=256)
def unset_model(names: tuple[str, ...]) -> type[BaseModel]:
    """SearchFilters restricted to `names` (same types and limits), other fields forbidden."""
    fields = {n: (SearchFilters.model_fields[n].annotation, SearchFilters.model_fields[n]) for n in names}
    return create_model("UnsetFilters", __config__=ConfigDict(extra="forbid"), **fields)


def prompt(instruction: str, words: list[str], unset: tuple[str, ...], today: str) -> str:
    return LLM_PROMPT.format(
        words=", ".join(words), instruction=instruction, today=today, fields="; ".join(f"{n}: {_values(n)}" for n in unset)
    )


def messages(instruction: str, words: list[str], unset: tuple[str, ...], today: str) -> list[dict]:
    out = []
    for text, w, fields, answer in SHOTS:
        out += [{"role": "user", "content": prompt(text, w, fields, today)}, {"role": "assistant", "content": answer}]
    return out + [{"role": "user", "content": prompt(instruction, words, unset, today)}]


def interpret_llm(gateway, instruction: str, *, now: datetime | None = None) -> tuple[SearchFilters, list[str], list[str]]:
    """The deterministic reading, with fields it left unset filled from the configured LLM when
    it left words it could not place (the query words stay the rules')."""
    now = now or datetime.now(UTC)
    base, terms, ignored = interpret(instruction, now=now)
    unset = tuple(n for n in ASKED if getattr(base, n) is None)
    if not terms or not unset:
        return base, terms, ignored
    out = gateway.chat_json(
        messages(instruction, terms, unset, now.date().isoformat()),
        schema=dict,
        schema_hint="{}",
        max_tokens=MAX_TOKENS,
        repair=False,
    )
    try:
        if not isinstance(out, dict):
            raise ValueError(str(out))
        for k in ("since", "until"):  # a day as asked for in the prompt: its start, in UTC
            if isinstance(out.get(k), str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", out[k]):
                out[k] += "T00:00:00Z"
        answer = unset_model(unset).model_validate(out)
    except (ValueError, ValidationError) as exc:  # the deterministic reading stands
        log.info("instruction LLM gave no valid answer: %s", exc)
        return base, terms, ignored
    extra = {k: v for k, v in answer.model_dump().items() if v is not None}
    if not extra:
        return base, terms, ignored
    combined = {k: v for k, v in set_fields(base).items()}
    combined.update(extra)
    return build_filters(combined, ignored), terms, ignored
