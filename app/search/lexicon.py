"""The vocabulary lift: words of the caller's own rows that mean what the query asks about.

A question often names a category ("What activities does Melanie do?") while the turns that
answer it name instances ("pottery class", "camping", "swimming"): no shared word for BM25, and
MiniLM's embedding of a whole turn is too diluted to bring each of them near the question. Each
org keeps its vocabulary (`lexicon`: one surface word per lexeme its episodes hold, embedded once
when the word first arrives, ~1 new word per turn after the first few hundred turns). At query
time the `terms` lexemes of the caller's servable episodes whose words lie nearest to the query's
embedding (cosine above `min_sim`, the query's own lexemes left out) score the rows holding them
by similarity x IDF, like BM25; the positive part of that score's z-value adds to the fused one
(app/search/signals.py). Chosen over the caller's rows only: a word only another user's rows
hold is never a candidate, and N and df are counted over the caller's rows, as for BM25.
Its effect on LoCoMo dev: docs/search.md.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections import Counter

from sqlalchemy.orm import Session

from app.kit.errors import RateLimited
from app.kit.runtime import wordvectors
from app.search.repository import lexicon as repo

log = logging.getLogger("memscale.lexicon")

WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*[A-Za-z]|[A-Za-z]|\d+")
MAX_WORD_CHARS = 40  # longer "words" (ids, hashes, base64) are not vocabulary
# New words embedded per stored item, at most (plus a few): bounds what a batch of junk text can
# cost (a word embeds in a fraction of a turn's time; docs/search.md has the rates).
WORDS_PER_ITEM, WORDS_EXTRA = 4, 64
EMBED_SLICE = 256  # words per call of the fair write lane


def new_words(db: Session, org_id: uuid.UUID, texts: list[str]) -> list[tuple[str, str]]:
    """(lexeme, word) for the lexemes in `texts` that the org's vocabulary lacks: each lexeme's
    most frequent surface word here, the most frequent lexemes first, at most WORDS_PER_ITEM per
    text (plus WORDS_EXTRA)."""
    counts = Counter(w.lower() for t in texts for w in WORD.findall(t) if len(w) <= MAX_WORD_CHARS)
    best: dict[str, str] = {}
    for word, lex, known in repo.word_lexemes(db, org_id, sorted(counts)):
        if not known and (lex not in best or (counts[word], word) > (counts[best[lex]], best[lex])):
            best[lex] = word
    order = sorted(best, key=lambda lex: (-counts[best[lex]], lex))
    return [(lex, best[lex]) for lex in order[: WORDS_PER_ITEM * len(texts) + WORDS_EXTRA]]


def embed_words(embedder, words: list[tuple[str, str]], who: str | None = None) -> list[tuple[tuple[str, str], object]]:
    """The words' embeddings, through the fair write lane when `who` is given (in slices). Words
    are embedded as passages (`embed`, not `embed_queries`): each stands for text the caller's
    rows hold and is compared with a query's vector as a row is, the query-to-passage relation a
    prefixed model (e5) is trained for; they are stored once and serve every later query. The
    vocabulary is best effort: a slice the embedding queue refuses (the key holder has a flood
    waiting) is skipped, and those words are added when they arrive again. Words of the public
    list are looked up in the model's table instead (app/kit/runtime/wordvectors.py)."""
    known = wordvectors.lookup(embedder, [w for _, w in words])
    out = [(e, v) for e, v in zip(words, known) if v is not None]
    words = [e for e, v in zip(words, known) if v is None]
    for i in range(0, len(words), EMBED_SLICE):
        part = words[i : i + EMBED_SLICE]
        texts = [w for _, w in part]
        try:
            vecs = (
                embedder.embed_write(who, texts)
                if who is not None and hasattr(embedder, "embed_write")
                else embedder.embed(texts)
            )
        except RateLimited:
            log.info("embedding queue full: %d vocabulary words left for later", len(words) - i)
            break
        out += list(zip(part, vecs))
    return out


def remember(db: Session, org_id: uuid.UUID, embedded: list[tuple[tuple[str, str], object]]) -> None:
    repo.add(db, org_id, [e for e, _ in embedded], [v for _, v in embedded])


def add_for(db: Session, embedder, org_id: uuid.UUID, texts: list[str]) -> None:
    """The new words of `texts`, embedded and stored in the caller's transaction (paths that embed
    inline, such as a session's episodes)."""
    remember(db, org_id, embed_words(embedder, new_words(db, org_id, texts)))


def forget_unheld(db: Session, org_id: uuid.UUID, lexemes: list[str]) -> int:
    return repo.forget_unheld(db, org_id, lexemes)


def lexemes_of(db: Session, org_id: uuid.UUID, episode_id: uuid.UUID) -> list[str]:
    return repo.lexemes_of(db, org_id, episode_id)
