"""On the offline model the console offers the starter adapter: loaded on `y`, or, when
none is registered, a notification saying which command trains it. On another model it
says nothing. Real Gemma, a real (random) LoRA adapter for it, a real store."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.settings import Settings
from app.console import ConsoleApp
from app.dialogs import ConfirmScreen
from storage import TraceStore
from tests.support.pilot import Notes, settle, until

pytestmark = [pytest.mark.real, pytest.mark.timeout(300)]
SIZE = (120, 40)


def gemma_adapter(gemma_dir: Path, folder: Path) -> Path:
    """A rank-4 LoRA adapter for Gemma with random weights (what is in it does not matter
    here, only that the backend loads it)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(gemma_dir, dtype=torch.bfloat16)
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    get_peft_model(model, config).save_pretrained(folder)
    return folder


async def test_the_offline_model_offers_its_starter_adapter(
    gemma_dir: Path, tmp_path: Path
) -> None:
    store = TraceStore(tmp_path / "traces.db")
    path = gemma_adapter(gemma_dir, tmp_path / "adapters" / "starter")
    store.register_adapter("starter", base_model=str(gemma_dir), path=path)
    app = ConsoleApp(store=store, settings=Settings(backend="transformers", model=str(gemma_dir)))
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


async def test_without_a_starter_adapter_the_console_says_how_to_train_one(
    gemma_dir: Path, tmp_path: Path, tiny_model_dir: Path
) -> None:
    for model, offered in ((gemma_dir, True), (tiny_model_dir, False)):
        store = TraceStore(tmp_path / f"{model.name}.db")
        app = ConsoleApp(store=store, settings=Settings(backend="transformers", model=str(model)))
        notes = Notes()
        async with app.run_test(size=SIZE, message_hook=notes) as pilot:
            await until(pilot, lambda a=app: a.workbench.backend is not None, "the model", 120)  # type: ignore[misc]
            await settle(pilot)
            said = [t for t in notes.texts() if "agent-console train starter" in t]
            assert bool(said) is offered, notes.texts()
            assert not isinstance(app.screen, ConfirmScreen)
        store.close()
