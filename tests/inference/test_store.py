"""Chunk KV store: content addressing, safetensors round trip, LRU tiers, delete, the hook."""

from __future__ import annotations

import hashlib

import pytest
import torch
from safetensors import safe_open

from app.inference.store import ChunkNotFound, ChunkStore, StoreConfig, content_hash, precompute_chunks


def test_round_trip_through_disk(engine, tmp_path, texts):
    store = ChunkStore(engine, StoreConfig(root=tmp_path))
    h = store.put(texts[0])
    assert h == hashlib.sha256(texts[0].encode()).hexdigest() == content_hash(texts[0])
    direct = engine.encode_chunk(texts[0])
    fresh = ChunkStore(engine, StoreConfig(root=tmp_path))  # new process, same folder
    assert fresh.stats()["disk_items"] == 1 and fresh.stats()["mem_items"] == 0
    got = fresh.get(h)
    assert torch.equal(got.token_ids, direct.token_ids)
    assert torch.equal(got.kv, direct.kv)
    assert fresh.in_memory(h)  # a disk hit is promoted to RAM
    path = tmp_path / engine.kv_id / h[:2] / f"{h}.safetensors"
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        assert set(f.keys()) == {"kv", "token_ids"}
    assert meta["kv_id"] == engine.kv_id and meta["content_hash"] == h and meta["version"] == "1"


def test_precompute_is_ordered_and_idempotent(store, texts):
    hashes = store.precompute([texts[1], texts[0], texts[1]])
    assert hashes == [content_hash(texts[1]), content_hash(texts[0]), content_hash(texts[1])]
    assert store.stats()["disk_items"] == 2 and store.stats()["mem_items"] == 2
    inode = next(store.dir.glob(f"*/{hashes[0]}.safetensors")).stat().st_ino
    assert store.put(texts[1]) == hashes[0]  # already there: not recomputed, not rewritten (the same file)
    assert next(store.dir.glob(f"*/{hashes[0]}.safetensors")).stat().st_ino == inode


def test_unknown_and_malformed_hashes(store, texts):
    with pytest.raises(ChunkNotFound):
        store.get("0" * 64)
    with pytest.raises(ChunkNotFound):
        store.get("../../etc/passwd")
    assert not store.has("0" * 64)


def test_memory_tier_is_lru_with_a_byte_limit(engine, tmp_path, texts):
    one = engine.encode_chunk(texts[0]).nbytes
    limit = int(2.5 * max(engine.encode_chunk(t).nbytes for t in texts))
    store = ChunkStore(engine, StoreConfig(root=tmp_path, mem_bytes=limit))
    a, b = store.put(texts[0]), store.put(texts[1])
    store.get(a)  # a is now the most recent
    c = store.put(texts[2])  # over the limit: b (least recent) leaves RAM
    assert store.in_memory(a) and store.in_memory(c) and not store.in_memory(b)
    assert store.stats()["mem_bytes"] <= limit and one > 0
    assert torch.equal(store.get(b).kv, engine.encode_chunk(texts[1]).kv)  # still on disk


def test_disk_tier_evicts_least_recent_files(engine, tmp_path, texts):
    sizes = [engine.encode_chunk(t).nbytes for t in texts]
    store = ChunkStore(engine, StoreConfig(root=tmp_path, mem_bytes=0, disk_bytes=int(sizes[0] + sizes[1] + 4096)))
    a, b = store.put(texts[0]), store.put(texts[1])
    store.get(a)  # touch a
    c = store.put(texts[2])
    assert store.stats()["disk_bytes"] <= store.config.disk_bytes
    assert store.has(a) and store.has(c) and not store.has(b)
    with pytest.raises(ChunkNotFound):
        store.get(b)


def test_putting_a_stored_chunk_again_makes_it_recent_in_both_tiers(engine, tmp_path, texts):
    """A precompute of chunks some of which are stored already, then a get of all of them (what
    a generate after /v1/chunks does): the new chunks must not evict the old ones just asked for."""
    sizes = [engine.encode_chunk(t).nbytes for t in texts]
    room = int(sizes[0] + sizes[1] + 4096)
    store = ChunkStore(engine, StoreConfig(root=tmp_path, mem_bytes=room, disk_bytes=room))
    a, b = store.put(texts[0]), store.put(texts[1])
    hashes = store.precompute([texts[0], texts[2]])  # a again (stored, oldest), then a new one
    assert hashes == [a, content_hash(texts[2])]
    assert [store.get(h).n_tokens for h in hashes] == [engine.encode_chunk(t).n_tokens for t in (texts[0], texts[2])]
    assert store.in_memory(a) and not store.has(b)  # b, not a, was the least recent


def test_delete_removes_both_tiers(store, texts):
    h = store.put(texts[2])
    assert store.in_memory(h) and store.has(h)
    assert store.delete(h) is True
    assert not store.has(h) and not store.in_memory(h)
    assert not any(store.dir.glob(f"*/{h}.safetensors"))
    with pytest.raises(ChunkNotFound):
        store.get(h)
    assert store.delete(h) is False
    assert store.stats() == {"mem_items": 0, "mem_bytes": 0, "disk_items": 0, "disk_bytes": 0}


def test_delete_reaches_kv_another_engine_configuration_wrote(engine, engine_alone, tmp_path, texts):
    """A chunk's KV stored under an earlier kv_id (chunks computed alone, before anchoring; another
    dtype or system prompt) is never read by this engine, but erasure must still remove it."""
    alone = engine_alone
    old, new = ChunkStore(alone, StoreConfig(root=tmp_path)), ChunkStore(engine, StoreConfig(root=tmp_path))
    h, other = old.put(texts[0]), old.put(texts[1])
    assert old.dir != new.dir and not new.has(h)  # the anchored engine does not read it
    assert new.delete(h) is True
    assert not list(tmp_path.glob(f"*/*/{h}.safetensors"))
    assert list(tmp_path.glob(f"*/*/{other}.safetensors"))  # only the erased chunk


def test_hook_for_the_bootstrap_pipeline(store, texts):
    hashes = precompute_chunks(texts[:2], store=store)
    assert hashes == [content_hash(t) for t in texts[:2]]
    assert all(store.has(h) for h in hashes)


def test_a_file_written_by_another_process_is_found(engine, tmp_path, texts):
    reader = ChunkStore(engine, StoreConfig(root=tmp_path))
    writer = ChunkStore(engine, StoreConfig(root=tmp_path))
    h = writer.put(texts[0])
    assert torch.equal(reader.get(h).token_ids, engine.chunk_ids(texts[0]))


def test_a_chunk_stored_before_anchoring_is_served_after_the_upgrade(engine, engine_alone, tmp_path, texts):
    """A handoff names chunks by hash only: after the upgrade to anchored chunk KV the tier
    recomputes a chunk's KV from the token ids the old configuration stored, instead of a 404."""
    alone = engine_alone
    h = ChunkStore(alone, StoreConfig(root=tmp_path)).put(texts[0])
    # another checkpoint whose name extends this one's is never adopted (its tokenizer may differ)
    stranger = tmp_path / f"{engine.model_id}-v2-float32" / h[:2]
    stranger.mkdir(parents=True)
    (tmp_path / alone.kv_id / h[:2] / f"{h}.safetensors").rename(stranger / f"{h}.safetensors")
    new = ChunkStore(engine, StoreConfig(root=tmp_path))
    with pytest.raises(ChunkNotFound):
        new.get(h)
    (stranger / f"{h}.safetensors").rename(tmp_path / alone.kv_id / h[:2] / f"{h}.safetensors")
    got = new.get(h)
    want = engine.encode_chunk(texts[0])
    assert torch.equal(got.token_ids, want.token_ids)
    torch.testing.assert_close(got.kv, want.kv, rtol=1e-5, atol=1e-5)  # anchored KV, not the old one
    assert ChunkStore(engine, StoreConfig(root=tmp_path)).has(h)  # written under the new kv_id
    assert new.delete(h) and not list(tmp_path.glob(f"*/*/{h}.safetensors"))  # both copies erased
