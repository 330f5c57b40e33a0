"""Shared fixtures: the real SmolLM2-135M-Instruct weights on CPU (loaded once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]

CORPUS = [
    "Project Falcon is led by Maria Chen. Its budget is 4.2 million euros and it launches on "
    "14 March 2026 in Lisbon. The main vendor is Nordlicht GmbH.",
    "Tomas Berg leads the Orion team in Oslo. Travel above 800 euros needs approval from the "
    "finance director, Ana Ruiz. The Orion help desk answers on extension 4471.",
]


@pytest.fixture(scope="session")
def smol():
    from app.kit.runtime.localmodel import load_causal_lm, local_model_dir

    torch.manual_seed(0)
    return load_causal_lm(
        local_model_dir(REPO / ".memscale"), threads=1
    )  # 1 thread: the 2 cores are shared; oversubscribed OpenMP is slower


@pytest.fixture(scope="session")
def model(smol):
    return smol[0]


@pytest.fixture(scope="session")
def tokenizer(smol):
    return smol[1]


@pytest.fixture(scope="session")
def corpus() -> list[str]:
    return list(CORPUS)
