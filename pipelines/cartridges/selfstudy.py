"""Self-study: synthetic conversations about a corpus, written by the model itself.

Design choices
- The corpus token stream is cut into chunks (512–4096 tokens in production; tests use less).
- One shard = one chunk x ``batch_size`` samples: the chunk's KV is computed once and shared by
  the whole batch. Shard ``j`` uses chunk ``j mod n_chunks`` and an RNG seeded by (seed, j), so
  a shard's content does not depend on which shards ran before — the run is resumable.
- Per sample: draw a seed prompt (structuring, summarisation, question, use case, creative);
  with the chunk in context the model writes a user message (sampled); then, again with the
  chunk in context, it answers that message, and the top-k (k=20) log-probs of every answer
  token are recorded. The student later sees the same conversation tokens without the chunk.
- Output directory: ``manifest.json`` (config, model id, corpus hash — a rerun against a
  different corpus or config refuses to mix), ``shard-NNNNN.safetensors`` (tensors; written
  atomically, its presence marks the shard done) and ``shard-NNNNN.jsonl`` (readable text).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tqdm import tqdm

from app.inference.context_distillation import DistillExample
from app.inference.kv import compute_kv, prefix_cache, prefix_length
from app.kit.runtime.localmodel import decode
from pipelines.cartridges.chat import CHATML, context_ids, conversation_ids, corpus_text, encode, stop_ids

# Short and concrete: a 135M model follows "write a quiz question about the text above" but
# drifts on long meta-instructions (see docs/cartridges.md).
SEED_PROMPTS: dict[str, list[str]] = {
    "structuring": [
        "Write a request asking to list the key facts from the text above.",
        "Write a request asking to put one item from the text above into a table.",
    ],
    "summarization": ["Write a request asking for a summary of one part of the text above."],
    "question": [
        "Write a quiz question about the text above.",
        "Write a question about a name, a number or a date in the text above.",
    ],
    "use_case": ["Write a question a new employee could ask about the text above."],
    "creative": ["Write a request for a short poem about one item in the text above."],
}


class SelfStudyMismatch(RuntimeError):
    """The output directory holds self-study data for another corpus or configuration."""


@dataclass(frozen=True)
class SelfStudyConfig:
    samples: int = 256
    # a corpus that fits is one chunk: the teacher sees all of it (docs/cartridges.md, round 3)
    chunk_tokens: int = 4096
    batch_size: int = 16  # samples per shard; all share one chunk
    max_question_tokens: int = 32
    max_answer_tokens: int = 128
    question_temperature: float = 0.5
    answer_temperature: float = 0.0
    top_k: int = 20
    seed: int = 0


def chunk_tokens(ids: list[int], size: int) -> list[list[int]]:
    """Cut ``ids`` into windows of ``size``; a short tail (< size/2) joins the previous chunk."""
    if size <= 0:
        raise ValueError("chunk size must be positive")
    chunks = [ids[i : i + size] for i in range(0, len(ids), size)]
    if len(chunks) > 1 and len(chunks[-1]) < size // 2:
        tail = chunks.pop()
        chunks[-1] = chunks[-1] + tail
    return chunks


def _strip(ids: list[int], stops: set[int]) -> list[int]:
    return [t for t in ids if t not in stops]


def run_shard(
    model, tokenizer, chunk: list[int], n: int, config: SelfStudyConfig, rng_seed: int
) -> tuple[list[DistillExample], list[dict]]:
    """``n`` conversations about one chunk; returns examples and readable records."""
    rng = random.Random(rng_seed)
    gen = torch.Generator().manual_seed(rng_seed)
    stops = stop_ids(tokenizer)
    prefix = compute_kv(model, torch.tensor(encode(tokenizer, CHATML.context_open) + chunk))
    P = prefix_length(prefix)
    kinds = [rng.choice(sorted(SEED_PROMPTS)) for _ in range(n)]
    seeds = [rng.choice(SEED_PROMPTS[k]) for k in kinds]
    asks = decode(
        model,
        prefix_cache(prefix, n),
        [conversation_ids(tokenizer, s)[0] for s in seeds],
        start=P,
        max_new_tokens=config.max_question_tokens,
        stop_ids=stops,
        temperature=config.question_temperature,
        generator=gen,
        pad_id=tokenizer.pad_token_id or 0,
    )
    questions = [_strip(a.tokens, stops) or encode(tokenizer, s) for a, s in zip(asks, seeds)]
    heads = [conversation_ids(tokenizer, q)[0] for q in questions]
    answers = decode(
        model,
        prefix_cache(prefix, n),
        heads,
        start=P,
        max_new_tokens=config.max_answer_tokens,
        stop_ids=stops,
        temperature=config.answer_temperature,
        record_top_k=config.top_k,
        generator=gen,
        pad_id=tokenizer.pad_token_id or 0,
    )
    examples, records = [], []
    for kind, q, head, ans in zip(kinds, questions, heads, answers):
        conv = torch.tensor(head + ans.tokens, dtype=torch.long)
        examples.append(DistillExample(conv, len(head), ans.topk_ids.long(), ans.topk_logprobs))
        records.append(
            {"seed_type": kind, "question": tokenizer.decode(q), "answer": tokenizer.decode(_strip(ans.tokens, stops))}
        )
    return examples, records


def _teacher_scored(model, prefix, n_ctx: int, conv: list[int], start: int, top_k: int) -> DistillExample:
    """One teacher-forced conversation after the teacher's context `prefix` (`n_ctx` positions):
    the teacher's top-k log-probs at every answer token (`conv[start:]`), in one forward pass."""
    ids = torch.tensor(conv)
    pos = torch.arange(n_ctx, n_ctx + len(conv))[None]
    logits = model(ids[None], cache=prefix_cache(prefix), position_ids=pos, use_cache=True).logits[0]
    lp = torch.log_softmax(logits[start - 1 : len(conv) - 1].float(), -1)  # predicts conv[start:]
    top_lp, top_id = lp.topk(top_k, -1)
    return DistillExample(ids, start, top_id.long(), top_lp)


@torch.inference_mode()
def recital_examples(
    model, tokenizer, corpus_ids: list[int], *, chunk: int = 512, piece: int = 64, cue_tokens: int = 8, top_k: int = 20
) -> list[DistillExample]:
    """Cue-and-quote conversations over every ``piece`` tokens of the corpus, no sampling.

    The user asks for the passage that starts with its first ``cue_tokens`` tokens; the answer is
    the passage itself; the teacher (its ``chunk`` in context) scores it in one forward pass.
    Teacher-forced context distillation on the corpus text: cheap (no decoding) and it covers
    every fact of the corpus, where model-written questions cover what the model noticed.
    """
    out = []
    for ch in chunk_tokens(list(corpus_ids), chunk):
        prefix = compute_kv(model, torch.tensor(encode(tokenizer, CHATML.context_open) + ch))
        n_ctx = prefix_length(prefix)
        for i in range(0, len(ch) - cue_tokens - 8, piece):
            span = ch[i : i + piece]
            cue = tokenizer.decode(span[:cue_tokens]).strip()
            conv, start = conversation_ids(tokenizer, f"Quote the notes that start with: {cue}", span)
            out.append(_teacher_scored(model, prefix, n_ctx, conv, start, top_k))
    return out


def _sentences(text: str) -> list[str]:
    return [x.strip() for x in re.split(r"(?<=[.!?])\s+", text.strip()) if x.strip()]


@torch.inference_mode()
def cloze_examples(
    model,
    tokenizer,
    texts: list[str],
    *,
    chunk: int = 4096,
    cuts: tuple[float, ...] = (0.5, 0.75),
    min_words: int = 4,
    top_k: int = 20,
) -> list[DistillExample]:
    """Fill-the-gap conversations over every sentence of every document, no sampling.

    The user quotes the start of a sentence, named by its document's first sentence (its title:
    "It is led by ..." needs to know what "it" is), and the answer is the rest of the sentence;
    one conversation per cut (the share of words given). The teacher (the documents' group in
    context: documents are packed in order into groups of at most ``chunk`` tokens, so a corpus
    that fits is one group) scores the answer in one forward pass. Where recital asks to quote
    64 tokens from an 8-token cue, this asks for what a question asks for: the end of one
    statement (a name, a number, a month) given its subject. Built from the corpus text alone.
    """
    groups: list[list[str]] = [[]]
    used = 0
    for text in texts:
        n = len(encode(tokenizer, text)) + 2
        if groups[-1] and used + n > chunk:
            groups.append([])
            used = 0
        groups[-1].append(text)
        used += n
    out = []
    for docs in groups:
        prefix = compute_kv(model, torch.tensor(context_ids(tokenizer, corpus_text(docs))))
        n_ctx = prefix_length(prefix)
        for doc in docs:
            sentences = _sentences(doc)
            if len(sentences) < 2:
                continue
            title = sentences[0].rstrip(".")
            for sentence in sentences[1:]:
                words = sentence.split()
                if len(words) < min_words:
                    continue
                for cut in cuts:
                    k = min(len(words) - 1, max(1, round(cut * len(words))))
                    conv, start = conversation_ids(
                        tokenizer,
                        f"Complete the sentence from the notes on {title}: {' '.join(words[:k])} ...",
                        " ".join(words[k:]),
                    )
                    out.append(_teacher_scored(model, prefix, n_ctx, conv, start, top_k))
    return out


def save_shard(path: Path, examples: list[DistillExample], meta: dict[str, str]) -> None:
    conv = [ex.conv_ids.to(torch.int32) for ex in examples]
    lens = torch.tensor([0] + [c.numel() for c in conv])
    ans = torch.tensor([0] + [ex.topk_ids.shape[0] for ex in examples])
    tensors = {
        "conv_ids": torch.cat(conv),
        "conv_offsets": lens.cumsum(0),
        "answer_start": torch.tensor([ex.answer_start for ex in examples]),
        "topk_ids": torch.cat([ex.topk_ids.to(torch.int32) for ex in examples]),
        "topk_logprobs": torch.cat([ex.topk_logprobs.float() for ex in examples]),
        "topk_offsets": ans.cumsum(0),
    }
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata=meta)
    tmp.replace(path)


def load_shard(path: Path) -> list[DistillExample]:
    with safe_open(str(path), framework="pt") as f:
        t = {name: f.get_tensor(name) for name in f.keys()}
    co, to = t["conv_offsets"].tolist(), t["topk_offsets"].tolist()
    return [
        DistillExample(
            t["conv_ids"][co[i] : co[i + 1]].long(),
            int(t["answer_start"][i]),
            t["topk_ids"][to[i] : to[i + 1]].long(),
            t["topk_logprobs"][to[i] : to[i + 1]],
        )
        for i in range(len(co) - 1)
    ]


def load_examples(out_dir: str | Path) -> list[DistillExample]:
    """All examples of a (possibly partial) self-study directory, in shard order."""
    examples: list[DistillExample] = []
    for path in sorted(Path(out_dir).glob("shard-*.safetensors")):
        examples.extend(load_shard(path))
    return examples


def run_selfstudy(
    model,
    tokenizer,
    corpus_ids: list[int],
    out_dir: str | Path,
    config: SelfStudyConfig = SelfStudyConfig(),
    *,
    model_id: str = "",
    progress: bool = True,
) -> dict:
    """Generate (or finish generating) self-study data for ``corpus_ids`` into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    chunks = chunk_tokens(list(corpus_ids), config.chunk_tokens)
    manifest = {
        "config": asdict(config),
        "model_id": model_id,
        "corpus_sha256": hashlib.sha256(json.dumps(list(corpus_ids)).encode()).hexdigest(),
        "corpus_tokens": len(corpus_ids),
        "chunks": len(chunks),
    }
    manifest_path = out / "manifest.json"
    if manifest_path.exists():
        if json.loads(manifest_path.read_text()) != manifest:
            raise SelfStudyMismatch(f"{out} holds self-study data for another corpus or config")
    else:
        manifest_path.write_text(json.dumps(manifest, indent=2))
    n_shards = -(-config.samples // config.batch_size)
    sizes = [min(config.batch_size, config.samples - j * config.batch_size) for j in range(n_shards)]
    bar = tqdm(total=config.samples, desc="self-study", unit="conv", disable=not progress, leave=False)
    was_done = 0
    for j, size in enumerate(sizes):
        path = out / f"shard-{j:05d}.safetensors"
        if path.exists():
            was_done += size
            bar.update(size)
            continue
        chunk_index = j % len(chunks)
        examples, records = run_shard(model, tokenizer, chunks[chunk_index], size, config, rng_seed=config.seed * 1_000_003 + j)
        with open(out / f"shard-{j:05d}.jsonl", "w") as f:
            for rec in records:
                f.write(json.dumps({"shard": j, "chunk": chunk_index, **rec}) + "\n")
        save_shard(path, examples, {"shard": str(j), "chunk": str(chunk_index)})
        bar.update(size)
    bar.close()
    return {**manifest, "samples": config.samples, "resumed_samples": was_done, "shards": n_shards}
