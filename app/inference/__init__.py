"""The inference tier: KV state for a model call, in its own process (DESIGN.md §5).

- ``engine.py``: model loading, tokenizing into segments, greedy generation from a KV state.
- ``kv.py``: KV layouts, RoPE re-rotation by a position delta, position masks.
- ``blend.py``: CacheBlend and the ``full`` / ``prefix`` / ``reuse`` baselines.
- ``store.py``: the chunk KV store (content-addressed safetensors, RAM and disk LRU tiers).
- ``server.py`` / ``cli.py``: the HTTP API and ``memscale inference serve``.

Nothing here is imported by the API process; importing this package loads no torch.
"""
