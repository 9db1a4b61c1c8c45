"""On an offline model the console offers its starter adapter: loaded on `y`, or, on the
base model when none is registered, a notification saying which command trains it. On
another model it says nothing. Real Gemma and the real coder, a real (random) LoRA
adapter for each, a real store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agents.settings import Settings
from app.console import ConsoleApp
from app.dialogs import ConfirmScreen
from storage import TraceStore
from tests.support.pilot import Notes, settle, until

pytestmark = [pytest.mark.real, pytest.mark.timeout(300)]
SIZE = (120, 40)


def random_adapter(model_dir: Path, folder: Path) -> Path:
    """A rank-4 LoRA adapter for the model with random weights (what is in it does not
    matter here, only that the backend loads it)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    get_peft_model(model, config).save_pretrained(folder)
    return folder


# Gemma's conversion is the long tier's (tests/real/test_gemma.py): `make test` converts
# the default model only.
GEMMA = pytest.param("gemma_dir", marks=pytest.mark.slow, id="gemma_dir")


@pytest.mark.parametrize("model", [GEMMA, "qwen_dir"])
async def test_the_offline_model_offers_its_starter_adapter(
    model: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    model_dir: Path = request.getfixturevalue(model)
    store = TraceStore(tmp_path / "traces.db")
    path = random_adapter(model_dir, tmp_path / "adapters" / "starter")
    store.register_adapter("starter", base_model=str(model_dir), path=path)
    app = ConsoleApp(store=store, settings=Settings(backend="transformers", model=str(model_dir)))
    notes = Notes()
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the offer", 120)
        assert "Load the starter adapter 'starter'?" in str(app.screen.question)
        await pilot.press("y")
        await until(pilot, lambda: "adapter starter in use" in notes.texts(), "the adapter")
        assert (
            app.workbench.backend is not None and app.workbench.backend.active_adapter == "starter"
        )
        await settle(pilot)
    store.close()


@pytest.fixture
def tiny_as_the_base_model(tiny_model_dir: Path, tmp_path: Path) -> Path:
    """The tiny model in a converted folder named as the offline base model (Gemma): what
    the console decides from is the folder, and `make test` does not convert Gemma."""
    from agents.backends import offline

    folder = tmp_path / "models" / "gemma-3-270m"
    shutil.copytree(tiny_model_dir, folder)
    (folder / offline.STAMP).write_text(json.dumps({"version": offline.CONVERSION_VERSION}))
    assert offline.offline_entry(str(folder)) is not None
    return folder


@pytest.mark.parametrize(
    ("name", "offered"),
    [
        pytest.param("gemma_dir", True, marks=pytest.mark.slow, id="gemma_dir"),
        ("tiny_as_the_base_model", True),
        ("qwen_dir", False),
        ("tiny_model_dir", False),
    ],
)
async def test_without_a_starter_adapter_the_console_says_how_to_train_one(
    name: str, offered: bool, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # the base model is told; the coder, which works untaught, and a model that is not
    # an offline one are not
    model: Path = request.getfixturevalue(name)
    store = TraceStore(tmp_path / "traces.db")
    app = ConsoleApp(store=store, settings=Settings(backend="transformers", model=str(model)))
    notes = Notes()
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await until(pilot, lambda: app.workbench.backend is not None, "the model", 120)
        await settle(pilot)
        said = [t for t in notes.texts() if "agent-console train starter" in t]
        assert bool(said) is offered, notes.texts()
        assert not isinstance(app.screen, ConfirmScreen)
    store.close()
