"""`POST /v1/search {..., explain: true}`: each result's score as the sum of its ranking signals'
contributions (app/search/signals.py), off by default and absent from the JSON when off."""

from __future__ import annotations

from dataclasses import replace

from app.search.signals import SIGNALS, Pool, fuse
from app.search.tuning import DEFAULT_TUNING
from tests.test_search_ranking import _tuned, _turn

RESULT_KEYS = {
    "type",
    "id",
    "text",
    "score",
    "visibility",
    "labels",
    "groups",
    "created_at",
    "kind",
    "owner_id",
    "confidence",
    "session_id",
    "content_hash",
    "outcome",
    "occurred_at",
}


def _conversation(client, actor) -> list[str]:
    conv = [
        _turn("Melanie: How was the pottery workshop in Lisbon in May?", "s1", 0),
        _turn("Caroline: A blue bowl! I adored every minute of it.", "s1", 1),
        _turn("Caroline: Next I want to try the wheel, not only hand building.", "s1", 2),
    ]
    noise = [_turn(f"Caroline: I make pancakes at the workshop cafe on Sundays {i}.", f"n{i}", 10 + i) for i in range(12)]
    return client.post("/v1/episodes/batch", json={"items": conv + noise}, headers=actor.h).json()["ids"]


def _post(client, actor, **body):
    r = client.post("/v1/search", json={"types": ["episode"], "k": 10, **body}, headers=actor.h)
    assert r.status_code == 200, r.text
    return r.json()


def test_explain_contributions_sum_to_each_score(client, world):
    """Hybrid (the signal table, then the logistic), vector and text search: every result's
    contributions sum to its score within 1e-9, and the signals named are the table's."""
    org = world.org()
    alice = world.user(org)
    _conversation(client, alice)
    q = "what did Caroline make at the pottery workshop in Lisbon in May 2023?"
    for mode in ("hybrid", "vector", "text"):
        results = _post(client, alice, query=q, mode=mode, explain=True)["results"]
        assert results, mode
        for r in results:
            signals = r["explain"]["signals"]
            assert abs(sum(signals.values()) - r["score"]) < 1e-9, (mode, signals, r["score"])
            assert set(signals) <= set(SIGNALS) | {"logistic", "rounding", "vector", "bm25"}
    hybrid = _post(client, alice, query=q, explain=True)["results"]
    named = set().union(*(r["explain"]["signals"] for r in hybrid))
    assert {"vector", "bm25", "neighbour", "session", "length", "time", "logistic"} <= named


def test_explain_is_off_by_default_and_changes_no_result(client, world):
    """Without `explain` (or with false) the JSON carries no `explain` key and is byte for byte
    the same; with it, the same results in the same order with the same scores."""
    org = world.org()
    alice = world.user(org)
    _conversation(client, alice)
    q = "pottery workshop bowl"
    plain, off, on = (
        _post(client, alice, query=q),
        _post(client, alice, query=q, explain=False),
        _post(client, alice, query=q, explain=True),
    )
    assert all(set(r) == RESULT_KEYS for r in plain["results"]) and "explain" not in str(plain)
    strip = lambda out: [{k: v for k, v in r.items() if k != "explain"} for r in out["results"]]  # noqa: E731
    assert plain["results"] == off["results"] == strip(on)


def test_a_signal_set_to_zero_leaves_the_explanation(client, world):
    """Each signal is one entry of the table with one setting: at weight 0 it contributes nothing
    and is not named."""
    org = world.org()
    alice = world.user(org)
    _conversation(client, alice)
    q = "what did Caroline make at the pottery workshop?"
    with _tuned(client, neighbour=0.0, length_prior=0.0):
        results = _post(client, alice, query=q, explain=True)["results"]
    named = set().union(*(r["explain"]["signals"] for r in results))
    assert "neighbour" not in named and "length" not in named and "session" in named


class _Row:
    def __init__(self, id_: str, d: float | None, session_id: str | None, n_lex: int) -> None:
        self.id, self.d, self.session_id, self.n_lex = id_, d, session_id, n_lex


def test_fuse_adds_the_table_in_order_and_its_parts_are_the_total():
    """`fuse` over a hand-made pool: the parts of each row sum exactly to its total, and a turn's
    neighbour support reads the running total (a turn next to a strong one gains)."""
    rows = [_Row("a", 0.1, "s", 3), _Row("b", 0.9, "s", 8), _Row("c", 0.5, None, 1), _Row("d", None, "t", 0)]
    pool = Pool(rows=rows, bm25={"a": 2.0, "c": 0.5}, lifts={"time": {"b": 1.0}}, pairs=[("a", "b"), ("b", "a")], turns=True)
    total, parts = fuse(pool, DEFAULT_TUNING, explain=True)
    for i, t in total.items():
        assert sum(parts[i].values()) == t
    assert parts["b"]["neighbour"] > 0 and parts["c"]["neighbour"] == 0.0
    off, _ = fuse(pool, replace(DEFAULT_TUNING, neighbour=0.0, session=0.0, length_prior=0.0, time_weight=0.0))
    assert off == {i: parts[i]["vector"] + parts[i]["bm25"] for i in total}
