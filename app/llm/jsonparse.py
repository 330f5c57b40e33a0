"""Forgiving JSON extraction from model output.

Small models wrap JSON in prose or code fences, leave trailing commas, use Python quoting, or
run out of tokens mid-array. :func:`parse_json` recovers what can be recovered *safely*:

1. strip code fences (```json ... ```);
2. take the first balanced JSON object/array (brackets inside strings are ignored);
3. ``json.loads``; then the same after removing trailing commas;
4. ``ast.literal_eval`` (never executes code) after mapping ``true/false/null`` outside strings,
   which accepts single quotes, trailing commas and Python literals;
5. if the text ends inside an array/object (truncated output), cut back to the last complete
   element and close the open brackets.

Anything else raises :class:`JSONParseError` with a short reason.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\n?(.*?)(?:```|$)", re.DOTALL)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_MAX_LITERAL_LEN = 20_000  # ast.literal_eval on huge inputs is slow / can recurse deeply
_PAIRS = {"{": "}", "[": "]"}


class JSONParseError(ValueError):
    """The text holds no JSON value we can recover safely."""


def strip_code_fences(text: str) -> str:
    """Return the body of the first fenced block if there is one, else the text unchanged."""
    match = _FENCE.search(text)
    if match and match.group(2).strip():
        return match.group(2)
    return text


def _scan(text: str, start: int) -> tuple[int | None, list[str], int]:
    """Scan from an opening bracket at ``start``.

    Returns (end index of the balanced value or None, stack of still-open closers,
    index just after the last complete element at depth 1 — for truncation repair).
    Strings in double or single quotes are skipped, with backslash escapes.
    """
    stack: list[str] = []
    quote: str | None = None
    escaped = False
    last_complete = start + 1
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch in _PAIRS:
            stack.append(_PAIRS[ch])
        elif ch in "}]":
            if not stack or stack[-1] != ch:
                return None, stack, last_complete  # mismatched bracket: give up on this start
            stack.pop()
            if not stack:
                return i, stack, last_complete
            if len(stack) == 1:
                last_complete = i + 1
        elif ch == "," and len(stack) == 1:
            last_complete = i
    return None, stack, last_complete


def _to_python_literals(text: str) -> str:
    """Map JSON's true/false/null to Python's outside of string literals."""
    out: list[str] = []
    quote: str | None = None
    escaped = False
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
            i += 1
            continue
        if ch in "\"'":
            quote = ch
            out.append(ch)
            i += 1
            continue
        m = re.match(r"(true|false|null)\b", text[i:])
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            out.append({"true": "True", "false": "False", "null": "None"}[m.group(1)])
            i += len(m.group(1))
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _loads(candidate: str) -> Any:
    try:
        return json.loads(candidate)
    except ValueError:
        pass
    no_trailing = _TRAILING_COMMA.sub(r"\1", candidate)
    try:
        return json.loads(no_trailing)
    except ValueError:
        pass
    if len(candidate) <= _MAX_LITERAL_LEN:
        try:
            value = ast.literal_eval(_to_python_literals(candidate))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            value = None
        if isinstance(value, (dict, list)):
            return _jsonable(value)
    raise JSONParseError("not valid JSON")


def _jsonable(value: Any) -> Any:
    """literal_eval may produce tuples/sets/bytes; keep only JSON-shaped data."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def parse_json(text: str) -> Any:
    """Parse the first JSON object or array found in ``text`` (see module docstring)."""
    if text is None or not text.strip():
        raise JSONParseError("empty output")
    body = strip_code_fences(text).strip()
    for source in (body, text) if body != text else (text,):
        try:
            return json.loads(source)
        except ValueError:
            pass
        starts = [i for i, ch in enumerate(source) if ch in _PAIRS]
        for start in starts[:50]:
            end, stack, last_complete = _scan(source, start)
            if end is not None:
                try:
                    return _loads(source[start : end + 1])
                except JSONParseError:
                    continue
            if stack:  # runs to the end of the text: output was cut off
                value = _repair_truncated(source, start, stack, last_complete)
                if value is not None:
                    return value
    raise JSONParseError("no JSON object or array found")


def _repair_truncated(source: str, start: int, stack: list[str], last_complete: int) -> Any:
    """Output cut off mid-value: keep the complete top-level elements and close the brackets."""
    if last_complete <= start + 1:
        return None  # not one complete element: nothing trustworthy to keep
    outer = stack[0]
    kept = source[start:last_complete].rstrip().rstrip(",")
    try:
        return _loads(kept + outer)
    except JSONParseError:
        return None
