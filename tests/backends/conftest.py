"""Backend test fixtures: the tiny real model and adapter, built once per test session.

Built, not downloaded (no hub is reachable on the build machines): see
`tests/support/tiny_model.py`. A few seconds for the model, well under one for each adapter.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.tiny_model import build_tiny_adapter, build_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a random-init Qwen2ForCausalLM, its tokenizer and chat template."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model") / "model")


@pytest.fixture(scope="session")
def tiny_adapter_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A LoRA adapter for `tiny_model_dir` that changes its outputs (seed 1)."""
    return build_tiny_adapter(tiny_model_dir, tmp_path_factory.mktemp("tiny-adapter") / "a1")


@pytest.fixture(scope="session")
def tiny_adapter2_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A second, different adapter (seed 2), for switching between adapters."""
    return build_tiny_adapter(
        tiny_model_dir, tmp_path_factory.mktemp("tiny-adapter") / "a2", seed=2
    )
