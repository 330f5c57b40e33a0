"""LoCoMo through the memory service: evidence recall of /v1/context against full-context,
vector-only and text-only baselines, reader F1 (and LLM-judge accuracy when a judge is set).

    .venv/bin/python -m bench.quality.locomo [--quick] [--data PATH]

Modules: ``run`` (set-up, ingestion, retrieval per method), ``reader`` (answer prompts, F1,
judge), ``report`` (JSON, markdown, plots).
"""
