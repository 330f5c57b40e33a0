"""Rewriting a lesson-bearing sentence as a clean statement for the lesson finder.

The speaker prefix and lead-in cues go, "please always X" → "Always X", first person → "The
user", "our X" → "the X", one sentence with a capital and a full stop. Key values (identifiers,
numbers, names) are copied verbatim, never paraphrased.
"""

from __future__ import annotations

import re

from pipelines.distillation.segment import ALL_SPEAKERS, LEAD_LABEL

# Lead-in phrases that announce a lesson ("from now on", "remember that"); stripped from the statement.
_LEAD_PHRASE = re.compile(
    r"^((ok(ay)?|so|also|and|plus|oh|btw|by the way|one more thing|careful|quick note|note|two things|"
    r"please note|just)\b[,:]?\s*)*"
    r"((please\s+)?(remember|note|keep in mind|be aware|don't forget|do not forget|never forget)( that)?\b[,:]?\s*|"
    r"(from now on|going forward|moving forward|in future|in the future|henceforth|as of now|for the record|"
    r"heads[- ]up|fyi|just so you know|for your information|as a rule|for future reference|reminder)\b[,:]?\s*"
    r"(that\b\s*)?)+",
    re.I,
)


def strip_leads(s: str) -> str:
    prev = None
    while prev != s:
        prev = s
        s = LEAD_LABEL.sub("", s, count=1)
        s = _LEAD_PHRASE.sub("", s, count=1)
        # "No, ..." corrects the agent; "no production releases" is a negation and stays
        s = re.sub(r"^(no|nope|wrong|incorrect|right|yes|correct)\s*[,.!:;—-]+\s*", "", s, flags=re.I)
        s = re.sub(r"^(actually|careful|wait)\b[,.!:;—-]*\s*", "", s, flags=re.I)
        s = re.sub(r"^that'?s (wrong|not right|incorrect|outdated|old)\b[,.!:;—-]*\s*", "", s, flags=re.I)
        s = re.sub(r"^that is (wrong|not right|incorrect|outdated)\b[,.!:;—-]*\s*", "", s, flags=re.I)
        s = re.sub(r"^(wrong column|wrong region)\b[,.!:;—-]*\s*", "", s, flags=re.I)
        s = re.sub(r"^(two|three|a few) things( for the record)?\s*:\s*", "", s, flags=re.I)
        s = s.strip(" ,:;-—")
    return s


def _third_person(verb: str) -> str:
    if re.search(r"(s|sh|ch|x|z|o)$", verb):
        return verb + "es"
    if re.search(r"[^aeiou]y$", verb):
        return verb[:-1] + "ies"
    return verb + "s"


_PRONOUNS = [
    (r"^I'd rather\b", "The user would rather"),
    (r"^I would rather\b", "The user would rather"),
    (r"^I (prefer|like|love|hate|dislike|want|need)\b", lambda m: f"The user {m.group(1)}s"),
    (r"^I'm\b", "The user is"),
    (r"^I am\b", "The user is"),
    (r"^I (always|never|usually) (\w+)", lambda m: f"The user {m.group(1)} {_third_person(m.group(2))}"),
    (r"\bmy team\b", "the user's team"),
    (r"\bfor me\b", "for the user"),
    (r"\bto me\b", "to the user"),
    (r"\bsend me\b", "send the user"),
    (r"\bmy\b", "the user's"),
    (r"\bme\b", "the user"),
    (r"^[Oo]ur\b", "The"),
    (r"\bour\b", "the"),
    (r"^We\b", "The team"),
    (r"\bwe\b", "the team"),
    (r"(?<![-\w])(?<!the )(?<!an )(?<!a )us\b(?![-\w])", "the team"),
    (r"\byou (draft|prepare|send|write|create|make|produce)\b", lambda m: f"the assistant {_third_person(m.group(1))}"),
    (r"\byour\b", "the"),
    (r"\bto you\b", ""),
]


def statement(sentence: str) -> str:
    """One clean, self-contained sentence from a lesson-bearing sentence (values kept verbatim)."""
    s = " ".join(sentence.split())
    s = re.sub(r"^(" + "|".join(sorted(ALL_SPEAKERS, key=len, reverse=True)) + r")\s*:\s*", "", s, flags=re.I)
    s = strip_leads(s)
    s = re.sub(r"^(please|pls|kindly)\s+", "", s, flags=re.I)
    s = re.sub(r"^(could|can|would|will) you (please )?", "", s, flags=re.I)
    s = re.sub(r"^(and|also|plus|so|but)\b[,]?\s+", "", s, flags=re.I)
    s = re.sub(r"[,;]?\s*(please|thanks|thank you|thx|ok\?|okay\?|right\?)[.!]*$", "", s, flags=re.I)
    s = re.sub(r"\s*,?\s*(please )?remember that\.?$", "", s, flags=re.I)
    for rx, rep in _PRONOUNS:
        s = re.sub(rx, rep, s)
    s = re.sub(r"\bthe the\b", "the", s, flags=re.I)
    s = re.sub(r"\s{2,}", " ", s).strip(" ,;:-—")
    s = s.rstrip(".!;: ")
    if not s:
        return ""
    s = s[0].upper() + s[1:]
    return s + "."
