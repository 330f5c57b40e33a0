"""Prompt framing shared by self-study, distillation data, the job and the benchmark.

The corpus sits in the system turn: ``<|im_start|>system\\n{corpus}``. A cartridge replaces
exactly that token stream (it is initialised from its first ``p`` tokens), so the student sees
``[cartridge] <|im_end|>\\n<|im_start|>user\\n...`` where the teacher sees
``<|im_start|>system\\n{chunk} <|im_end|>\\n<|im_start|>user\\n...``: the conversation tokens
after the context are identical for both, which keeps answer positions aligned.
ChatML framing (SmolLM2, Qwen); the opening token doubles as the frozen attention sink.
"""

from __future__ import annotations

from dataclasses import dataclass

DOC_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class ChatFormat:
    context_open: str = "<|im_start|>system\n"
    turn_close: str = "<|im_end|>\n"
    user_open: str = "<|im_start|>user\n"
    assistant_open: str = "<|im_start|>assistant\n"
    end_token: str = "<|im_end|>"


CHATML = ChatFormat()


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def corpus_text(texts: list[str]) -> str:
    return DOC_SEPARATOR.join(t.strip() for t in texts)


def context_ids(tokenizer, text: str, fmt: ChatFormat = CHATML) -> list[int]:
    """The context token stream a cartridge stands in for (system turn, left open)."""
    return encode(tokenizer, fmt.context_open) + encode(tokenizer, text)


def conversation_ids(
    tokenizer, user: str | list[int], answer: str | list[int] | None = None, fmt: ChatFormat = CHATML
) -> tuple[list[int], int]:
    """Tokens that follow the context: close it, user turn, assistant turn.

    ``user``/``answer`` are text or already-generated token ids (spliced as they are, so the
    student sees exactly the tokens the teacher produced). Returns ``(ids, answer_start)``;
    with ``answer=None`` the ids end at the assistant header (a generation prompt) and
    ``answer_start == len(ids)``. An answer is closed with the end token unless it already is,
    and that end token is part of the answer span.
    """
    user_ids = encode(tokenizer, user.strip()) if isinstance(user, str) else list(user)
    head = encode(tokenizer, fmt.turn_close + fmt.user_open) + user_ids + encode(tokenizer, fmt.turn_close + fmt.assistant_open)
    if answer is None:
        return head, len(head)
    answer_ids = encode(tokenizer, answer) if isinstance(answer, str) else list(answer)
    end = encode(tokenizer, fmt.end_token)
    if answer_ids[-len(end) :] != end:
        answer_ids += end
    return head + answer_ids, len(head)


def stop_ids(tokenizer, fmt: ChatFormat = CHATML) -> set[int]:
    ids = set(encode(tokenizer, fmt.end_token))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids
