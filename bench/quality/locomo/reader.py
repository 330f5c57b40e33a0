"""The reader (answers from retrieved excerpts), LoCoMo answer F1, and the optional LLM judge.

F1 follows the LoCoMo paper's evaluation: lower-case, punctuation and articles removed, token
F1; category 1 (multi-hop) answers are comma-separated lists scored as the mean over gold parts
of the best-matching predicted part; category 3 keeps the gold answer before the first ';'.
The official script also Porter-stems tokens; we do not (no nltk here), which can only lower F1.
"""

from __future__ import annotations

import re
import string
from collections import Counter

READER_SYSTEM = (
    "You answer questions about a long conversation between two people, using only the "
    "excerpts given (each dated; grouped by session). Reply with a short "
    "answer of a few words, nothing else."
)
ANSWER_TOKENS = 24

JUDGE_SYSTEM = "You grade answers. Reply with one word: CORRECT or WRONG."


def reader_messages(excerpts: str, question: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": READER_SYSTEM},
        {"role": "user", "content": f"Excerpts:\n{excerpts}\n\nQuestion: {question}\nShort answer:"},
    ]


def clean_answer(raw: str) -> str:
    text = (raw or "").strip().splitlines()[0] if (raw or "").strip() else ""
    return re.sub(r"^(short )?answer\s*:\s*", "", text, flags=re.I).strip()


def normalize(s: str) -> str:
    s = str(s).lower().replace(",", " ")
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the|and)\b", " ", s)
    return " ".join(s.split())


def token_f1(pred: str, gold: str) -> float:
    p, g = normalize(pred).split(), normalize(gold).split()
    if not p or not g:
        return float(p == g)
    common = Counter(p) & Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def answer_f1(pred: str, gold: str, category: int) -> float:
    if category == 3:
        gold = gold.split(";")[0]
    if category == 1:
        golds = [x for x in gold.split(",") if x.strip()] or [gold]
        preds = [x for x in pred.split(",") if x.strip()] or [pred]
        return sum(max(token_f1(p, g) for p in preds) for g in golds) / len(golds)
    return token_f1(pred, gold)


def judge_messages(question: str, gold: str, pred: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": JUDGE_SYSTEM},
        {
            "role": "user",
            "content": f"Question: {question}\nGold answer: {gold}\nGenerated answer: {pred}\n"
            "Is the generated answer correct (same meaning as the gold answer)?",
        },
    ]


def judge_says_correct(raw: str) -> bool:
    words = re.findall(r"[A-Za-z]+", (raw or "").upper())
    return bool(words) and words[0] == "CORRECT"
