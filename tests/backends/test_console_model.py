"""The console loads the model in a worker after its first frame, and opens anyway when
there is none."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.notifications import Notify

from agents.settings import Settings
from app.console import ConsoleApp
from app.widgets.status_bar import StatusBar
from storage import TraceStore
from tests.support.pilot import until


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    with TraceStore(tmp_path / "t.db") as opened:
        yield opened


async def test_the_model_loads_after_the_first_frame(
    store: TraceStore, tiny_model_dir: Path
) -> None:
    settings = Settings(backend="transformers", model=str(tiny_model_dir))
    app = ConsoleApp(store=store, settings=settings)
    async with app.run_test() as pilot:
        status = app.main.query_one(StatusBar)
        assert status.backend == "loading model…"  # the frame is up before the model
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.workbench.backend is not None
        assert (status.backend, status.model) == ("transformers", str(tiny_model_dir))
        assert app.workbench.backend.score_yes_no(["Is it? "])  # a live model, not a placeholder


async def test_no_model_is_one_notification_and_the_console_works(
    store: TraceStore, tmp_path: Path
) -> None:
    notes: list[str] = []

    def hook(message: object) -> None:
        if isinstance(message, Notify):
            notes.append(message.notification.message)

    missing = tmp_path / "no-such-model"
    app = ConsoleApp(store=store, settings=Settings(backend="transformers", model=str(missing)))
    async with app.run_test(message_hook=hook) as pilot:
        # the store opens in a worker, and the model's starts after the next frame: wait
        # for the outcome, not for whichever worker happens to run
        await until(pilot, lambda: any(n.startswith("no model:") for n in notes), "the note")
        await pilot.pause()
        assert app.workbench.backend is None
        assert app.main.query_one(StatusBar).backend == "no model"
        (note,) = [n for n in notes if n.startswith("no model:")]
        assert str(missing) in note and "--base-url" in note and "\n" not in note
        await pilot.press("r")
        await app.workers.wait_for_complete()
        assert app.is_running
