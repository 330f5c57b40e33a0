"""Segmenting an episode for the lesson finder: speaker turns, then sentences.

Speaker labels (``User:``, ``Assistant:``, ``Human:``, ``Tool:``, ``alice:``, several on one line)
split a conversation into turns with a role (user, agent, tool, task); lead-in labels (``Heads
up:``, ``Team rule:``, ``Glossary:``) are cues, not speakers. Each turn is split into sentences.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

USER_SPEAKERS = {"user", "human", "customer", "client", "me", "feedback", "colleague", "reviewer"}
AGENT_SPEAKERS = {"assistant", "ai", "agent", "bot", "model", "copilot", "gpt", "chatbot", "system"}
TOOL_SPEAKERS = {"tool", "observation", "result", "output", "error", "ran", "sql", "response", "action", "call"}
TASK_SPEAKERS = {"task", "question", "goal", "query", "request", "outcome"}
ALL_SPEAKERS = USER_SPEAKERS | AGENT_SPEAKERS | TOOL_SPEAKERS | TASK_SPEAKERS

# Lead-in labels that announce a lesson ("Team rule: ..."): not a speaker; stripped from the statement.
LEAD_LABEL = re.compile(
    r"^(heads[- ]up|fyi|psa|note|n\.?b\.?|reminder|policy( reminder)?|team rule|rule|house rule|glossary|"
    r"definition|runbook|schema note|lesson(s)?( learned| learnt)?|tip|important|for the record|correction|"
    r"fix|solution|resolution|convention|standard|guideline|update|decision)\b(\s+[\w'-]+){0,5}\s*:\s+",
    re.I,
)


@dataclass(frozen=True)
class Turn:
    index: int
    role: str  # user | agent | tool | task | none
    text: str


SPEAKER_PREFIX = re.compile(r"(^|\s)(user|assistant|human|ai|agent|bot|system|tool|customer)\s*:", re.I)
_LABEL = re.compile(r"^\s*([A-Za-z][\w'-]{0,20}(?: [A-Za-z][\w'-]{0,20}){0,3})\s*:\s*(.*)$")
_INLINE = re.compile(r"(?<=[.!?])\s+(" + "|".join(sorted(ALL_SPEAKERS, key=len, reverse=True)) + r")\s*:\s*", re.I)
_ASKED = re.compile(r"^\s*(?:space [\w-]+\.\s*)?([A-Za-z][\w-]{0,20}) asked:\s*(.*)$", re.I)


def turns(content: str) -> list[Turn]:
    """Split an episode into speaker turns (a plain note is one turn with role ``none``)."""
    out: list[Turn] = []
    for line in (content or "").splitlines():
        if not line.strip():
            continue
        pieces = _INLINE.split(line)  # "User: a. Assistant: b." on one line
        segs = [pieces[0]] + [f"{pieces[i]}: {pieces[i + 1]}" for i in range(1, len(pieces) - 1, 2)]
        for seg in segs:
            role, text = "none", seg.strip()
            m = _ASKED.match(text)
            if m:
                role, text = "task", m.group(2)
            else:
                m = _LABEL.match(text)
                if m:
                    label = m.group(1).lower()
                    if label in ALL_SPEAKERS:
                        role = (
                            "user"
                            if label in USER_SPEAKERS
                            else "agent"
                            if label in AGENT_SPEAKERS
                            else "tool"
                            if label in TOOL_SPEAKERS
                            else "task"
                        )
                        text = m.group(2)
                    elif " " not in label and not LEAD_LABEL.match(text) and label not in ("wrong", "right", "yes"):
                        role, text = "user", m.group(2)  # "alice: ..." in a chat log
            if text.strip():
                out.append(Turn(len(out), role, text.strip()))
    return out


def sentences(text: str) -> list[str]:
    parts = re.split(r"(?<=[.!?])\s+|\n+", text)
    return [p.strip(" -*•\t") for p in parts if p and p.strip(" -*•\t")]
