"""The public word list's vectors (app/kit/runtime/wordvectors.py): embedded once per model, the
same vectors the model gives, used by a write for the vocabulary words the list holds, and never
holding anything a tenant wrote."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from sqlalchemy import text

from app.kit.runtime import wordvectors
from tests.helpers import ep

LISTED = ["pottery", "teacher", "bowls", "fired", "classes", "the", "our"]  # "kiln" is not on the list


@pytest.fixture
def table(embedder, tmp_path, monkeypatch):
    """A table over a small slice of the public list (plus LISTED) attached to the app's model
    for one test; the model's own table (if any) is put back after."""
    public = wordvectors.public_words()
    assert len(public) > 20_000 and set(LISTED) <= set(public)
    words = sorted(set(public[2000:2300]) | set(LISTED))
    t = wordvectors.Table(embedder, tmp_path, words=words)
    t.build()
    monkeypatch.setattr(embedder, "word_vectors", t, raising=False)
    return t


def test_a_table_holds_the_models_own_vectors(embedder, table):
    loaded = table.get()
    assert loaded is not None and len(loaded.row) >= 300
    got = loaded.lookup(["pottery", "teacher", "kiln"])
    assert got[2] is None  # not on the list: the model is asked, as before
    live = embedder.embed(["pottery", "teacher"])
    assert np.abs(np.stack(got[:2]) - live).max() < 1e-6
    # the file is named by the model and its weights: another model's table is another file
    assert table.path.name.startswith("words-local-all-minilm-l6-v2-")
    assert wordvectors.lookup(embedder, ["teacher"])[0] is not None


def test_a_table_that_differs_from_the_model_is_not_used(embedder, table, tmp_path):
    """A table whose vectors are not the model's (a file of another model's weights under the same
    name, a damaged file) is refused when it loads."""
    path = table.path
    with np.load(path) as z:
        words, vecs = z["words"], z["vectors"].copy()
    vecs[:, 0] += 0.01
    with open(path, "wb") as f:
        np.savez(f, words=words, vectors=vecs)
    fresh = wordvectors.Table(embedder, tmp_path, words=[str(w) for w in words])
    assert fresh.get() is None


def test_a_write_takes_listed_words_from_the_table(client, world, admin_engine, embedder, table, monkeypatch):
    """A write embeds the items and only the new words the list lacks; the vocabulary it stores
    holds the table's vectors for the others (the model's own, so search ranks as before). The
    table is not touched by what tenants write: a word only they wrote never enters it."""
    asked: list[str] = []
    inner_embed = embedder.embed
    monkeypatch.setattr(embedder, "embed", lambda texts: asked.extend(texts) or inner_embed(texts))
    before = hashlib.sha256(table.path.read_bytes()).hexdigest()
    org = world.org()
    alice = world.user(org)
    body = ep("Pottery classes: the teacher fired our bowls in the kiln")
    assert client.post("/v1/episodes", json=body, headers=alice.h).status_code == 201
    assert body["content"] in asked and "kiln" in asked  # the item, and the one word off the list
    assert not {"pottery", "teacher", "bowls", "fired", "classes"} & set(asked)
    with admin_engine.connect() as c:
        rows = c.execute(
            text("SELECT word, embedding::text FROM lexicon WHERE org_id = :o AND word IN ('pottery', 'teacher', 'kiln')"),
            {"o": alice.org_id},
        ).all()
    stored = {w: np.array([float(x) for x in v.strip("[]").split(",")], dtype=np.float32) for w, v in rows}
    words = ["pottery", "teacher", "kiln"]
    assert set(stored) == set(words)
    live = inner_embed(words)
    assert max(float(np.abs(stored[w] - live[i]).max()) for i, w in enumerate(words)) < 1e-6
    assert hashlib.sha256(table.path.read_bytes()).hexdigest() == before
    fresh = wordvectors.Table(embedder, table.path.parent, words=table.words)
    assert fresh.get().lookup(["kiln"]) == [None]


def test_serve_builds_a_local_models_table_and_asks_no_provider(embedder, tmp_path, monkeypatch):
    """`memscale serve` builds the table of a local model once (wordvectors.ensure); a provider's
    model is not sent the public list unasked."""
    local = wordvectors.Table(embedder, tmp_path / "local", words=LISTED)
    monkeypatch.setattr(embedder, "word_vectors", local, raising=False)
    said = []
    assert wordvectors.ensure(embedder, say=said.append) == local.path and local.path.exists() and len(said) == 1
    assert wordvectors.ensure(embedder, say=said.append) == local.path and len(said) == 1  # built once

    class Provider:
        model, dim = "openai/text-embedding-3-small", 1536

        def embed(self, texts):
            raise AssertionError("the provider was asked")

    provider = Provider()
    provider.word_vectors = wordvectors.Table(provider, tmp_path / "provider", words=LISTED)
    assert wordvectors.ensure(provider) is None and not (tmp_path / "provider").exists()
