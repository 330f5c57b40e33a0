"""Shared fixtures: the real SmolLM2-135M-Instruct weights, loaded once per session."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from app.inference.engine import Engine, EngineConfig  # noqa: E402
from app.inference.store import ChunkStore, StoreConfig  # noqa: E402
from app.kit.runtime.localmodel import local_model_dir  # noqa: E402

TEXTS = [
    "The capital of Zorbia is Plimton. Zorbia exports copper, tea and wool to its neighbours.",
    "Dr. Anna Kell runs the Plimton observatory. She discovered comet K-17 in the spring of 2011.",
    "Comet K-17 returns every 43 years. Its tail looks green because of the gases it carries.",
]


@pytest.fixture(scope="session")
def engine() -> Engine:
    data_dir = os.environ.get("MEMSCALE_DATA_DIR", ".memscale")
    path = os.environ.get("MEMSCALE_INFERENCE_MODEL") or local_model_dir(data_dir)
    torch.manual_seed(0)
    return Engine.load(EngineConfig(model_path=str(path), device="cpu", threads=1))


@pytest.fixture(scope="session")
def engine_alone(engine) -> Engine:
    """The same model with chunk KV computed alone (the layout before anchoring; its own kv_id)."""
    import dataclasses

    return Engine(dataclasses.replace(engine.config, anchor_chunks=False), engine.model, engine.tokenizer)


@pytest.fixture(scope="session")
def texts() -> list[str]:
    return list(TEXTS)


@pytest.fixture(scope="session")
def chunks(engine):
    return [engine.encode_chunk(t) for t in TEXTS]


@pytest.fixture()
def store(engine, tmp_path) -> ChunkStore:
    return ChunkStore(engine, StoreConfig(root=tmp_path / "kv"))
