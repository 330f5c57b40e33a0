"""The cartridge trainer: corpus texts in, a versioned cartridge file out (self-study, then
context distillation). ``pipelines/cartridges/job.py`` is the job that calls it.

A pure step for the job: it takes the texts and content hashes of the assets
the runner has already authorised, and knows nothing of orgs, scopes or lineage — the runner
records ``trained_on`` and the scope itself from the returned stats. Everything it writes lives
under ``out_dir`` (``selfstudy/``, ``checkpoints/``, ``cartridge.safetensors``), and a rerun with
the same arguments resumes where a killed run stopped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from app.inference.cartridge import Cartridge, kv_bytes
from app.inference.context_distillation import DistillConfig, evaluate_loss, train
from app.kit.runtime.localmodel import LOCAL_MODEL_ID, load_causal_lm, local_model_dir
from pipelines.cartridges.chat import context_ids, corpus_text, encode
from pipelines.cartridges.selfstudy import SelfStudyConfig, cloze_examples, load_examples, load_shard, run_selfstudy, save_shard

log = logging.getLogger(__name__)

CARTRIDGE_FILE = "cartridge.safetensors"

# Neutral filler for ``init="unrelated"`` (the Cartridges paper's alternative initialisation).
UNRELATED_TEXT = (
    "The river runs through the valley in early spring, when the snow on the hills begins to "
    "melt. Farmers repair their fences, children walk to school along the old stone road, and "
    "the market in the square opens on Saturdays with bread, cheese, apples and honey. In the "
    "evening the bells of the church ring twice and the lights of the houses come on one by "
    "one. Travellers who pass through often stop at the inn by the bridge, where the soup is "
    "warm and the stories are long. "
)


@dataclass(frozen=True)
class CartridgeJobConfig:
    selfstudy: SelfStudyConfig = field(default_factory=SelfStudyConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    init: str = "corpus"  # "corpus": KV of the first p corpus tokens; "unrelated": of filler text
    frozen_tokens: int = 1
    # fill-the-gap conversations over every sentence join the self-study data (selfstudy.
    # cloze_examples): a signal tied to the corpus's facts, where a small model's own questions
    # are mostly vague (docs/cartridges.md, third round)
    cloze: bool = True


def initial_cartridge(
    model,
    tokenizer,
    corpus_texts: list[str],
    p: int,
    *,
    model_id: str,
    content_hashes: list[str],
    init: str = "corpus",
    frozen_tokens: int = 1,
) -> Cartridge:
    """A cartridge before training: the KV of the first ``p`` context tokens."""
    if init == "corpus":
        ids = context_ids(tokenizer, corpus_text(corpus_texts))
        if len(ids) < p:
            raise ValueError(f"corpus has {len(ids)} tokens, fewer than p={p}: serve it in context")
    elif init == "unrelated":
        text = UNRELATED_TEXT
        while len(encode(tokenizer, text)) < p:
            text += UNRELATED_TEXT
        ids = context_ids(tokenizer, text)
    else:
        raise ValueError(f"unknown init {init!r}")
    return Cartridge.from_tokens(
        model, ids, p, model_id=model_id, content_hashes=content_hashes, init=init, frozen_tokens=frozen_tokens
    )


def training_examples(
    model,
    tokenizer,
    corpus_texts: list[str],
    out: Path,
    selfstudy: SelfStudyConfig,
    *,
    cloze: bool,
    model_id: str,
    progress: bool = True,
) -> tuple[list, dict, int]:
    """The recipe's training data: self-study conversations (``out/selfstudy``), plus fill-the-gap
    ones over every sentence (``out/cloze.safetensors``) when ``cloze``. Both are kept, so a rerun
    resumes. Returns (examples, self-study stats, number of fill-the-gap examples)."""
    body = encode(tokenizer, corpus_text(corpus_texts))
    ss_stats = run_selfstudy(model, tokenizer, body, out / "selfstudy", selfstudy, model_id=model_id, progress=progress)
    examples = load_examples(out / "selfstudy")
    if not cloze:
        return examples, ss_stats, 0
    cloze_path = out / "cloze.safetensors"  # deterministic (teacher-forced), kept for a rerun
    if not cloze_path.exists():
        # the same teacher context size as self-study's (one knob: the corpus that fits is one group)
        save_shard(cloze_path, cloze_examples(model, tokenizer, corpus_texts, chunk=selfstudy.chunk_tokens), {"kind": "cloze"})
    extra = load_shard(cloze_path)
    return examples + extra, ss_stats, len(extra)


def train_cartridge(
    corpus_texts: list[str],
    content_hashes: list[str],
    out_dir: str | Path,
    p: int,
    steps: int,
    *,
    config: CartridgeJobConfig = CartridgeJobConfig(),
    model=None,
    tokenizer=None,
    model_id: str = LOCAL_MODEL_ID,
    data_dir: str | Path = ".memscale",
    progress: bool = True,
    check: Callable[[], None] | None = None,
) -> tuple[Path, dict]:
    """Self-study + context distillation over ``corpus_texts``; returns (cartridge path, stats).

    ``check`` is called after self-study and before every distillation step; it may raise to
    abandon the run (a cancelled job), leaving only files under ``out_dir``.

    ``content_hashes`` identify the source assets and are stored in the cartridge metadata.
    ``model``/``tokenizer`` default to the bundled local model loaded from ``data_dir``.
    """
    if not corpus_texts or len(corpus_texts) != len(content_hashes):
        raise ValueError("need one content hash per corpus text")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if model is None or tokenizer is None:
        model, tokenizer = load_causal_lm(local_model_dir(data_dir))
    t0 = time.perf_counter()
    body = encode(tokenizer, corpus_text(corpus_texts))
    examples, ss_stats, n_cloze = training_examples(
        model, tokenizer, corpus_texts, out, config.selfstudy, cloze=config.cloze, model_id=model_id, progress=progress
    )
    t1 = time.perf_counter()
    if check is not None:
        check()
    cart = initial_cartridge(
        model,
        tokenizer,
        corpus_texts,
        p,
        model_id=model_id,
        content_hashes=list(content_hashes),
        init=config.init,
        frozen_tokens=config.frozen_tokens,
    )
    probe = examples[:32]  # fixed training subset: a fit measure, not held-out
    loss_before = evaluate_loss(model, cart.as_prefix_kv(), probe)
    distill_cfg = replace(config.distill, steps=steps)
    train_stats = train(model, cart, examples, distill_cfg, checkpoint_dir=out / "checkpoints", progress=progress, check=check)
    stats = {
        "model_id": model_id,
        "p": p,
        "init": config.init,
        "corpus_tokens": len(body),
        "content_hashes": list(content_hashes),
        "kv_bytes_fp32": cart.nbytes(torch.float32),
        "kv_bytes_corpus_in_context_fp32": kv_bytes(cart.num_layers, cart.kv_heads, cart.head_dim, len(body)),
        "selfstudy": {k: ss_stats[k] for k in ("samples", "chunks", "resumed_samples")},
        "cloze_examples": n_cloze,
        "selfstudy_seconds": round(t1 - t0, 2),
        "selfstudy_config": asdict(config.selfstudy),
        **{k: v for k, v in train_stats.items() if k != "config"},
        "distill_config": train_stats["config"],
        "probe_loss_before": round(loss_before, 5),
        "probe_loss_after": round(evaluate_loss(model, cart.as_prefix_kv(), probe), 5),
    }
    cart.stats = stats
    path = cart.save(out / CARTRIDGE_FILE)
    log.info("cartridge p=%d trained in %.0fs -> %s", p, time.perf_counter() - t0, path)
    return path, stats
