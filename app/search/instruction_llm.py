"""The optional LLM reading of an instruction (`MEMSCALE_INSTRUCTION_LLM=true`): it fills only
the fields the deterministic reading (app/search/instruction.py) left unset, and its JSON must
validate against a model generated from SearchFilters or it is dropped whole."""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from pydantic import BaseModel

from app.search.instruction import _build, interpret, set_fields
from app.search.schemas import SearchFilters

log = logging.getLogger("memscale.instruction")


class LLMFilters(BaseModel):
    """The JSON the LLM interpreter must return: SearchFilters' instruction fields (generated
    from that model, so the two never drift) plus the topic words for the query."""

    filters: SearchFilters
    terms: list[str] = []


LLM_PROMPT = ("Turn a search instruction into JSON filters. Today is {today}. Fields (omit what the instruction "
              "does not say): kinds (rule, fact, preference, procedure, schema_hint, conversation, trajectory, "
              "feedback, note), exclude_kinds, labels, exclude_labels, since and until (ISO dates, until exclusive), "
              "owner (\"me\"), visibility (private, group, org), groups, asset_kinds (document, table_schema, "
              "glossary), status (active, superseded), source (api, distill, bootstrap); terms: topic words.\n"
              "Instruction: {instruction}")
LLM_EXAMPLE = '{"filters": {"kinds": ["rule"], "since": "2026-07-01T00:00:00Z"}, "terms": ["finance"]}'


def interpret_llm(gateway, instruction: str, *, now: datetime | None = None) -> tuple[SearchFilters, list[str], list[str]]:  # noqa: ANN001
    """The deterministic reading, with the fields it left unset filled from the configured LLM.

    The answer must validate against `LLMFilters` (pydantic, i.e. the JSON schema generated from
    SearchFilters); an invalid answer is dropped (listed in `ignored`), never half-used. The
    prompt carries a short example rather than the whole schema: the schema is ~1,500 tokens,
    which the bundled 135M model on two CPU cores needed minutes to read."""
    now = now or datetime.now(timezone.utc)
    base, terms, ignored = interpret(instruction, now=now)
    out = gateway.chat_json([{"role": "user", "content": LLM_PROMPT.format(today=now.date().isoformat(),
                                                                           instruction=instruction)}],
                            schema=LLMFilters, schema_hint=LLM_EXAMPLE, max_tokens=96, repair=False)
    if not isinstance(out, LLMFilters):  # the deterministic reading stands
        log.info("instruction LLM gave no valid answer: %s", out)
        return base, terms, ignored
    extra = {k: v for k, v in set_fields(out.filters).items() if k != "session_id" and getattr(base, k) is None}
    combined = base.model_dump()
    combined.update({k: getattr(out.filters, k) for k in extra})
    filters = _build({k: v for k, v in combined.items() if v is not None}, ignored)
    return filters, terms or [t.lower() for t in out.terms][:8], ignored
