"""Gateway behaviour: structured output with repair (fake), retries/timeouts through real litellm.

The litellm tests register a scripted custom provider (``flaky/...``) next to the gateway's own
``local`` provider, so they run the gateway's real path — litellm dispatch, exception mapping,
retry classification, deadline — without a model or a network.
"""

import threading
import time

import pytest
from pydantic import BaseModel

from app.llm import FakeGateway, Gateway, JSONFailure, LLMError, LLMTimeout


class Person(BaseModel):
    name: str
    age: int


# -- chat_json on the shared base (FakeGateway uses exactly this path) -------------------------


def test_chat_json_parses_fenced_answer_first_time():
    g = FakeGateway(['```json\n{"name": "Ada", "age": 36}\n```'])
    assert g.chat_json([("user", "who?")], Person) == Person(name="Ada", age=36)
    assert len(g.calls) == 1 and g.stats.json_ok == 1 and g.stats.json_repaired == 0


def test_chat_json_repairs_broken_json_once():
    g = FakeGateway(["{name: Ada, age: thirty", '{"name": "Ada", "age": 36}'])
    result = g.chat_json([("user", "who?")], Person)
    assert result == Person(name="Ada", age=36)
    assert len(g.calls) == 2
    repair = g.calls[1]
    # the model sees its own broken answer and a repair request naming the expected shape
    assert repair.messages[-2] == {"role": "assistant", "content": "{name: Ada, age: thirty"}
    assert "not valid JSON" in repair.last_user or "no JSON" in repair.last_user
    assert '"name": string' in repair.last_user and '"age": integer' in repair.last_user
    assert g.stats.json_repaired == 1


def test_chat_json_repairs_wrong_shape():
    g = FakeGateway(['{"name": "Ada", "age": "old"}', '{"name": "Ada", "age": 36}'])
    assert g.chat_json([("user", "who?")], Person) == Person(name="Ada", age=36)
    assert "wrong shape" in g.calls[1].last_user and "age" in g.calls[1].last_user


def test_chat_json_returns_failure_after_one_repair_and_never_raises():
    g = FakeGateway(["I cannot do that.", "Still no JSON, sorry."])
    result = g.chat_json([("user", "who?")], Person)
    assert isinstance(result, JSONFailure) and not result
    assert result.attempts == 2 and result.raw == "Still no JSON, sorry."
    assert len(g.calls) == 2 and g.stats.json_failures == 1


def test_chat_json_records_llm_errors_as_failures():
    g = FakeGateway([LLMError("provider down", retryable=True)])
    result = g.chat_json([("user", "x")], Person)
    assert isinstance(result, JSONFailure) and "provider down" in result.error and result.attempts == 1


def test_chat_json_forgives_list_wrapping_and_single_objects():
    g = FakeGateway(['{"people": [{"name": "A", "age": 1}]}', '[{"name": "B", "age": 2}]'])
    assert g.chat_json([("user", "x")], list[Person]) == [Person(name="A", age=1)]
    assert g.chat_json([("user", "x")], Person) == Person(name="B", age=2)


def test_fake_rules_match_prompt_substrings_and_sequences():
    g = FakeGateway(rules=[("alpha", ["first", "second"]), ("beta", "B")], default="D")
    assert [g.chat([("user", "alpha?")]) for _ in range(3)] == ["first", "second", "second"]
    assert g.chat([("user", "beta")]) == "B" and g.chat([("user", "gamma")]) == "D"
    with pytest.raises(LLMError):
        FakeGateway().chat([("user", "nothing scripted")])


# -- the real Gateway through litellm, with a scripted provider -----------------------------------


class _Script:
    def __init__(self):
        self.plan: list = []
        self.calls = 0
        self.lock = threading.Lock()


@pytest.fixture(scope="module")
def flaky():
    from app.llm.provider import load_litellm

    litellm = load_litellm()
    from litellm import CustomLLM
    from litellm.llms.custom_llm import CustomLLMError

    script = _Script()

    class Flaky(CustomLLM):
        def completion(self, model, messages, *args, model_response=None, optional_params=None, **kw):
            with script.lock:
                script.calls += 1
                step = script.plan.pop(0) if script.plan else "ok"
            if isinstance(step, int):
                raise CustomLLMError(status_code=step, message=f"scripted {step}")
            if isinstance(step, float):
                time.sleep(step)
                step = "slow"
            model_response.choices[0].message.content = f"{step}:{messages[-1]['content']}"
            return model_response

    litellm.custom_provider_map = [e for e in litellm.custom_provider_map if e["provider"] != "flaky"] + [
        {"provider": "flaky", "custom_handler": Flaky()}
    ]
    return script


def _gateway(**kw):
    return Gateway(model="flaky/test", data_dir="/nonexistent", **{"timeout_s": 5.0, "max_retries": 2, "backoff_s": 0.01, **kw})


def test_gateway_retries_transient_errors(flaky):
    flaky.plan, flaky.calls = [503, 429], 0
    g = _gateway()
    assert g.chat([("user", "hello")], max_tokens=5) == "ok:hello"
    assert flaky.calls == 3 and g.stats.retries == 2 and g.stats.errors == 0


def test_gateway_gives_up_after_max_retries(flaky):
    flaky.plan, flaky.calls = [500, 500, 500, 500], 0
    g = _gateway(max_retries=1)
    with pytest.raises(LLMError) as err:
        g.chat([("user", "hello")])
    assert err.value.retryable and err.value.status_code == 500
    assert flaky.calls == 2 and g.stats.errors == 1


def test_gateway_does_not_retry_client_errors(flaky):
    flaky.plan, flaky.calls = [400], 0
    g = _gateway()
    with pytest.raises(LLMError) as err:
        g.chat([("user", "hello")])
    assert not err.value.retryable and flaky.calls == 1


def test_gateway_enforces_its_deadline_even_if_the_provider_does_not(flaky):
    flaky.plan, flaky.calls = [3.0, 3.0], 0
    g = _gateway(timeout_s=0.2, max_retries=1, grace_s=0.1)
    started = time.monotonic()
    with pytest.raises(LLMTimeout):
        g.chat([("user", "hello")])
    elapsed = time.monotonic() - started
    assert flaky.calls == 2  # the timeout counts as transient and was retried once
    assert elapsed < 2 * (0.2 + 0.1) + 0.5  # two attempts, each bounded by timeout + grace


def test_gateway_chat_json_never_raises_on_provider_failure(flaky):
    flaky.plan, flaky.calls = [401], 0
    result = _gateway().chat_json([("user", "hello")], Person)
    assert isinstance(result, JSONFailure) and "401" in result.error


def test_count_tokens_for_remote_models_uses_litellm(flaky):
    g = Gateway(model="openai/gpt-4o-mini", data_dir="/nonexistent")
    n = g.count_tokens("The quick brown fox jumps over the lazy dog.")
    assert 8 <= n <= 14 and g.count_tokens("") == 0


def test_gateway_emits_one_span_per_call(flaky):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    flaky.plan, flaky.calls = [503], 0
    g = _gateway()
    tracer = provider.get_tracer("test")
    import app.llm.gateway as gw

    original = gw._tracer
    gw._tracer = lambda: tracer  # the global provider can be set once per process; inject instead
    try:
        g.chat([("user", "traced")], max_tokens=7)
    finally:
        gw._tracer = original
    spans = [s for s in exporter.get_finished_spans() if s.name == "llm.chat"]
    assert len(spans) == 1
    attrs = spans[0].attributes
    assert attrs["gen_ai.request.model"] == "flaky/test" and attrs["gen_ai.request.max_tokens"] == 7
    assert attrs["memscale.llm.attempts"] == 2


def test_failed_call_span_has_error_status(flaky):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    import app.llm.gateway as gw

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    flaky.plan, flaky.calls = [404], 0
    original = gw._tracer
    gw._tracer = lambda: provider.get_tracer("test")
    try:
        with pytest.raises(LLMError):
            _gateway().chat([("user", "x")])
    finally:
        gw._tracer = original
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code == StatusCode.ERROR
    assert any(e.name == "exception" for e in span.events)


def test_local_model_loads_once_under_concurrent_first_calls(monkeypatch, tmp_path):
    import transformers

    from app.llm.local import LocalChatModel

    loads = []

    class FakeModel:
        def eval(self):
            return self

    def slow_load(path):
        loads.append(path)
        time.sleep(0.2)  # long enough for every thread to arrive while the first one loads
        return FakeModel(), object()

    monkeypatch.setattr("app.llm.local.load_causal_lm", slow_load)  # the project's one loader
    monkeypatch.setattr("app.llm.local.stop_token_ids", lambda model, tok: set())
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", staticmethod(lambda path: object()))
    local = LocalChatModel(tmp_path)
    got = []
    threads = [threading.Thread(target=lambda: got.append(local.load())) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(loads) == 1 and len(got) == 6 and all(m is got[0] for m in got)


def test_async_variants_run_off_the_event_loop():
    import asyncio

    g = FakeGateway(['{"name": "Ada", "age": 36}', "plain"])
    result = asyncio.run(g.achat_json([("user", "x")], Person))
    assert result == Person(name="Ada", age=36)
    assert asyncio.run(g.achat([("user", "y")])) == "plain"


def test_count_tokens_many_matches_one_by_one_for_local_and_remote_models(settings, flaky):
    """Context assembly counts its pieces in one batch; the counts are the one-by-one counts
    (the local SmolLM2 tokenizer batched, a remote model through litellm one by one)."""
    texts = ["- Caroline: I went to a pottery class yesterday!", "", "- " + "kiln " * 300, "## Memories"]
    for model, data_dir in (("local/smollm2", settings.data_dir), ("openai/gpt-4o-mini", "/nonexistent")):
        # a fresh gateway per count: each gateway remembers the counts it made (count_tokens)
        one_by_one = [Gateway(model=model, data_dir=data_dir).count_tokens(t) for t in texts]
        assert Gateway(model=model, data_dir=data_dir).count_tokens_many(texts) == one_by_one
    assert Gateway(model="local/smollm2", data_dir=settings.data_dir).count_tokens_many(texts)[2] > 300


def test_remembered_token_counts_are_the_tokenizers_and_keep_no_text(settings):
    """Counts are remembered per text (context assembly counts the same turns request after
    request): a remembered count is the tokenizer's, texts of one length are told apart, and
    the memory holds (hash, length) pairs and counts, never the text."""
    from app.llm.local import get_local_model

    tok = get_local_model(settings.data_dir).tokenizer
    g = Gateway(model="local/smollm2", data_dir=settings.data_dir)
    texts = ["Melanie: pottery class on Tuesday", "Melanie: pottery class on Thursday", "kiln " * 50]
    first = g.count_tokens_many(texts + texts[:1])
    again = [g.count_tokens(t) for t in texts] + g.count_tokens_many(list(reversed(texts)))
    truth = [len(tok.encode(t, add_special_tokens=False)) for t in texts]
    assert first == truth + truth[:1] and again == truth + list(reversed(truth))
    assert len(g._counts) == 3 and all(isinstance(h, int) and isinstance(n, int) for h, n in g._counts)
    assert not any(isinstance(v, str) for k in g._counts for v in k)
    g.COUNT_CACHE = 3  # over the bound it starts again
    assert g.count_tokens("a fourth text") == len(tok.encode("a fourth text", add_special_tokens=False))
    assert len(g._counts) == 1
