"""Cartridges: a trainable KV prefix that stands in for a corpus in the model's context.

Design choices
- One ``(K, V)`` pair of ``nn.Parameter`` per layer, each shaped ``(kv_heads, p, head_dim)``.
  Keys are stored *after* RoPE at positions ``0..p-1``, exactly as the HF cache stores them, so a
  cartridge initialised from ``p`` corpus tokens is the KV of those tokens (equivalence-tested).
- Initialisation: the KV of the first ``p`` tokens of the corpus (default) or of unrelated text.
- The first ``frozen_tokens`` positions (default 1: the attention sink) never change: a gradient
  hook zeroes their gradient, so Adam (no weight decay) leaves them bit-identical.
- Artifacts are versioned safetensors — tensors ``layers.{i}.keys`` / ``layers.{i}.values`` plus
  string metadata (format, version, model id, p, content hashes, JSON training stats). No pickles.
- Composition concatenates prefixes along the token axis without re-rotation (as in the
  Cartridges paper): each cartridge keeps the positions it was trained at; queries continue at
  ``sum(p)``.
- This module holds tensors only; prompt framing and tokenisation live in ``pipelines.cartridges``.
- Serving: :class:`CartridgeDirectory` maps ids to files and composes them; it fits the inference
  server's ``resolve_cartridges`` hook.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from app.inference.kv import PrefixKV, compute_kv

FORMAT = "memscale.cartridge"
FORMAT_VERSION = 1


class CartridgeFormatError(ValueError):
    """The file is not a cartridge this code can read."""


class Cartridge(nn.Module):
    """A per-layer KV prefix of ``p`` tokens; the trainable stand-in for a corpus."""

    def __init__(
        self,
        keys: Sequence[torch.Tensor],
        values: Sequence[torch.Tensor],
        *,
        model_id: str,
        content_hashes: Sequence[str] = (),
        init: str = "corpus",
        frozen_tokens: int = 1,
        stats: dict | None = None,
    ):
        super().__init__()
        if len(keys) != len(values) or not keys:
            raise ValueError("need one (keys, values) pair per layer")
        shape = tuple(keys[0].shape)
        if len(shape) != 3:
            raise ValueError(f"keys must be (kv_heads, p, head_dim), got {shape}")
        for k, v in zip(keys, values):
            if tuple(k.shape) != shape or tuple(v.shape) != shape:
                raise ValueError("all layers must share one (kv_heads, p, head_dim) shape")
        if not 0 <= frozen_tokens <= shape[1]:
            raise ValueError("frozen_tokens must lie in [0, p]")
        # (kv_heads, p, head_dim) per layer
        self.keys = nn.ParameterList(nn.Parameter(k.detach().clone().float()) for k in keys)
        self.values = nn.ParameterList(nn.Parameter(v.detach().clone().float()) for v in values)
        self.model_id = model_id
        self.content_hashes = list(content_hashes)
        self.init = init
        self.frozen_tokens = frozen_tokens
        self.stats: dict = dict(stats or {})
        if frozen_tokens:
            for param in self.parameters():
                param.register_hook(self._zero_frozen_grad)

    def _zero_frozen_grad(self, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        grad[:, : self.frozen_tokens] = 0
        return grad

    # -- shape -------------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.keys)

    @property
    def kv_heads(self) -> int:
        return self.keys[0].shape[0]

    @property
    def p(self) -> int:
        return self.keys[0].shape[1]

    @property
    def head_dim(self) -> int:
        return self.keys[0].shape[2]

    def nbytes(self, dtype: torch.dtype = torch.float32) -> int:
        """KV memory of this prefix when served in ``dtype`` (keys + values, all layers)."""
        return kv_bytes(self.num_layers, self.kv_heads, self.head_dim, self.p, dtype)

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_tokens(
        cls,
        model: nn.Module,
        token_ids: Sequence[int] | torch.Tensor,
        p: int,
        *,
        model_id: str,
        content_hashes: Sequence[str] = (),
        init: str = "corpus",
        frozen_tokens: int = 1,
    ) -> Cartridge:
        """The KV of the first ``p`` of ``token_ids`` run through ``model`` at positions 0..p-1."""
        ids = torch.as_tensor(token_ids, dtype=torch.long).flatten()[:p]
        if ids.numel() < p:
            raise ValueError(f"need at least p={p} tokens to initialise, got {ids.numel()}")
        kv = compute_kv(model, ids)  # per layer (1, kv_heads, p, head_dim) x 2
        keys, values = [k[0] for k, _ in kv], [v[0] for _, v in kv]
        return cls(keys, values, model_id=model_id, content_hashes=content_hashes, init=init, frozen_tokens=frozen_tokens)

    # -- serving -----------------------------------------------------------------------------
    def as_prefix_kv(self) -> PrefixKV:
        """Per layer ``(K, V)`` shaped (1, kv_heads, p, head_dim); differentiable views."""
        return [(k[None], v[None]) for k, v in zip(self.keys, self.values)]

    # -- storage -----------------------------------------------------------------------------
    def metadata(self) -> dict[str, str]:
        return {
            "format": FORMAT,
            "format_version": str(FORMAT_VERSION),
            "model_id": self.model_id,
            "p": str(self.p),
            "num_layers": str(self.num_layers),
            "kv_heads": str(self.kv_heads),
            "head_dim": str(self.head_dim),
            "frozen_tokens": str(self.frozen_tokens),
            "init": self.init,
            "content_hashes": json.dumps(self.content_hashes),
            "stats": json.dumps(self.stats, sort_keys=True),
        }

    def save(self, path: str | Path) -> Path:
        """Write atomically (temp file + rename) as safetensors with string metadata."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tensors: dict[str, torch.Tensor] = {}
        for i, (k, v) in enumerate(zip(self.keys, self.values)):
            tensors[f"layers.{i}.keys"] = k.detach().contiguous().cpu()
            tensors[f"layers.{i}.values"] = v.detach().contiguous().cpu()
        tmp = path.with_name(path.name + ".tmp")
        save_file(tensors, str(tmp), metadata=self.metadata())
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu") -> Cartridge:
        meta = read_metadata(path)
        n = int(meta["num_layers"])
        with safe_open(str(path), framework="pt", device=str(device)) as f:
            keys = [f.get_tensor(f"layers.{i}.keys") for i in range(n)]
            values = [f.get_tensor(f"layers.{i}.values") for i in range(n)]
        cart = cls(
            keys,
            values,
            model_id=meta["model_id"],
            content_hashes=json.loads(meta["content_hashes"]),
            init=meta["init"],
            frozen_tokens=int(meta["frozen_tokens"]),
            stats=json.loads(meta["stats"]),
        )
        if cart.p != int(meta["p"]):
            raise CartridgeFormatError(f"{path}: metadata p={meta['p']} but tensors have {cart.p}")
        return cart


def read_metadata(path: str | Path) -> dict[str, str]:
    """The metadata of a cartridge file, checked for format and version (no tensors read)."""
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    if meta.get("format") != FORMAT:
        raise CartridgeFormatError(f"{path}: not a cartridge file")
    version = int(meta.get("format_version", "0"))
    if version != FORMAT_VERSION:
        raise CartridgeFormatError(f"{path}: format version {version}, expected {FORMAT_VERSION}")
    return meta


def kv_bytes(num_layers: int, kv_heads: int, head_dim: int, tokens: int, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of a KV cache of ``tokens`` positions (keys and values, every layer)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    return 2 * num_layers * kv_heads * head_dim * tokens * itemsize


def compose(cartridges: Sequence[Cartridge]) -> PrefixKV:
    """Concatenate cartridges along the token axis; queries then start at ``sum(c.p)``."""
    if not cartridges:
        raise ValueError("compose needs at least one cartridge")
    first = cartridges[0]
    for c in cartridges[1:]:
        if (c.model_id, c.num_layers, c.kv_heads, c.head_dim) != (
            first.model_id,
            first.num_layers,
            first.kv_heads,
            first.head_dim,
        ):
            raise ValueError("cartridges for different models cannot be composed")
    prefixes = [c.as_prefix_kv() for c in cartridges]
    return [
        (torch.cat([pre[i][0] for pre in prefixes], dim=2), torch.cat([pre[i][1] for pre in prefixes], dim=2))
        for i in range(first.num_layers)
    ]


_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class CartridgeDirectory:
    """Resolve cartridge ids to one composed prefix, LRU-cached.

    A cartridge ``id`` is ``<root>/<id>.safetensors`` or ``<root>/<id>/cartridge.safetensors``
    (the layout ``train_cartridge`` writes under ``<data_dir>/cartridges/<job id>/``).
    Usable as the inference server's ``resolve_cartridges``: unknown ids raise ``KeyError(id)``;
    ids that are not plain names (``../x``) are unknown by construction; a cartridge trained
    for another model raises ``ValueError``. The returned tensors carry no autograd history.
    """

    def __init__(self, root: str | Path, model_id: str | None = None, device: str | torch.device = "cpu", max_cached: int = 8):
        self.root, self.model_id, self.device = Path(root), model_id, device
        self.max_cached = max_cached
        self._cache: OrderedDict[str, Cartridge] = OrderedDict()

    def path(self, cartridge_id: str) -> Path:
        if not _ID.fullmatch(cartridge_id):
            raise KeyError(cartridge_id)
        for candidate in (self.root / f"{cartridge_id}.safetensors", self.root / cartridge_id / "cartridge.safetensors"):
            if candidate.is_file():
                return candidate
        raise KeyError(cartridge_id)

    def load(self, cartridge_id: str) -> Cartridge:
        if cartridge_id in self._cache:
            self._cache.move_to_end(cartridge_id)
            return self._cache[cartridge_id]
        cart = Cartridge.load(self.path(cartridge_id), device=self.device)
        if self.model_id is not None and cart.model_id != self.model_id:
            raise ValueError(f"cartridge {cartridge_id} is for {cart.model_id}, not {self.model_id}")
        cart.requires_grad_(False)
        self._cache[cartridge_id] = cart
        while len(self._cache) > self.max_cached:
            self._cache.popitem(last=False)
        return cart

    def __call__(self, ids: Sequence[str]) -> PrefixKV:
        with torch.no_grad():
            return compose([self.load(i) for i in ids])

    def forget(self, cartridge_id: str) -> bool:
        """An erased cartridge: out of the cache and off the disk (both layouts); whether it was
        held. Ids that are not plain names were never held."""
        if not _ID.fullmatch(cartridge_id):
            return False
        held = self._cache.pop(cartridge_id, None) is not None
        flat, folder = self.root / f"{cartridge_id}.safetensors", self.root / cartridge_id
        if flat.is_file():
            flat.unlink()
            held = True
        if folder.is_dir():
            shutil.rmtree(folder)
            held = True
        return held


def directory_resolver_factory(root: str | Path):
    """The server's default resolver: the cartridges `train_cartridge` writes under
    ``<data_dir>/cartridges/<cartridge id>/``, so the ids in a /v1/context handoff are servable as
    they are. Only cartridges trained for the served checkpoint (``engine.model_id``, its folder
    name) are accepted."""

    def factory(engine) -> CartridgeDirectory:
        return CartridgeDirectory(root, model_id=engine.model_id, device=engine.device)

    return factory
