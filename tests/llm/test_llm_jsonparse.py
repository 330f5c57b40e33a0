"""Forgiving JSON recovery from model output (app.llm.jsonparse)."""

import pytest

from app.llm.jsonparse import JSONParseError, parse_json, strip_code_fences


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('```json\n{"a": [1, 2]}\n```', {"a": [1, 2]}),
        ("```\n[1, 2]\n```\nHope this helps!", [1, 2]),
        ('Sure! Here it is: {"text": "x}", "n": 2} -- done', {"text": "x}", "n": 2}),
        ('[{"a": 1}, {"b": 2},]', [{"a": 1}, {"b": 2}]),
        ('{"x": [1, 2,], "y": {"z": 3,},}', {"x": [1, 2], "y": {"z": 3}}),
        ("{'text': 'it\\'s fine', 'ok': true, 'none': null}", {"text": "it's fine", "ok": True, "none": None}),
        ("{'a': True, 'b': None}", {"a": True, "b": None}),
        ('Here\'s the list: [{"a": "don\'t"}]', [{"a": "don't"}]),
        ('[see the notes] then {"a": 1}', {"a": 1}),
    ],
)
def test_recovers_json(raw, expected):
    assert parse_json(raw) == expected


def test_truncated_array_keeps_complete_elements_only():
    raw = '[{"text": "one", "source": "R1"}, {"text": "two", "source": "R2"}, {"text": "thr'
    assert parse_json(raw) == [{"text": "one", "source": "R1"}, {"text": "two", "source": "R2"}]


def test_truncated_number_is_not_guessed():
    # "[1, 2" might have been "[1, 25]": the last element is incomplete and is dropped
    assert parse_json("[1, 2") == [1]


def test_truncated_without_a_complete_element_fails():
    with pytest.raises(JSONParseError):
        parse_json('{"text": "never clo')


@pytest.mark.parametrize("raw", ["", "   ", "no json here", "{a: 1}", "[unquoted, words]", "__import__('os')"])
def test_unrecoverable_raises(raw):
    with pytest.raises(JSONParseError):
        parse_json(raw)


def test_literal_eval_path_never_executes_code():
    # a call expression is not a literal: rejected, nothing runs
    with pytest.raises(JSONParseError):
        parse_json("[__import__('os').system('echo pwned')]")


def test_strip_code_fences_without_fence_returns_text():
    assert strip_code_fences("plain") == "plain"
    assert strip_code_fences("```python\nx = 1\n```") == "x = 1\n"
