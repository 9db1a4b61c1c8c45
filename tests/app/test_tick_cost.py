"""What a tick will cost on this machine, said once the session's first block is in: the
real model on a CPU took ~7 minutes a tick with the defaults, and nothing said so."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.notifications import Notify

from agents.events import BlockSampled
from agents.settings import Settings
from agents.workbench import Workbench
from app import live_control
from app.console import ConsoleApp
from app.live_control import LiveControl
from storage import TraceStore
from tests.app.test_live import SIZE, settings, until
from tests.support.answer_task import TASK

pytestmark = pytest.mark.timeout(300)


def block(seconds: float, rate: float | None = 20.0) -> BlockSampled:
    return BlockSampled(
        session_id=1,
        block="orientation",
        tick=1,
        candidates=4,
        tokens=int(seconds * (rate or 1)),
        seconds=seconds,
        tokens_per_second=rate,
    )


def test_the_first_block_says_what_a_tick_costs_and_a_slow_one_how_to_speed_up() -> None:
    control = LiveControl(Workbench(None, Settings(backend="none")))
    told = control.sampled(block(100.0))
    assert told is not None
    assert told.startswith("the model writes 20 tokens/s here: 4 candidates of a block took 100 s")
    assert "takes about 7 min" in told and "--candidates 2" in told and "serve" in told
    assert control.tick_cost == "a tick ≈ 7 min"
    assert control.sampled(block(300.0)) is None  # said once a session

    fast = LiveControl(Workbench(None, Settings(backend="none")))
    assert fast.sampled(block(2.0)) is None  # a quick tick needs no advice
    assert fast.tick_cost == "a tick ≈ 8 s"


async def test_a_live_session_tells_the_operator(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live_control, "SLOW_TICK", 0.0)  # the tiny model is never slow
    notes: list[str] = []

    def hook(message: object) -> None:
        if isinstance(message, Notify):
            notes.append(message.notification.message)

    with TraceStore(tmp_path / "traces.db") as store:
        app = ConsoleApp(store=store, settings=settings(tiny_model_dir, approval="auto"), task=TASK)
        async with app.run_test(size=SIZE, message_hook=hook) as pilot:
            await until(pilot, lambda: app.main.control.tick_cost != "", "the first block")
            await until(pilot, lambda: any("tokens/s here" in n for n in notes), "the line")
            await until(pilot, lambda: app.main.live is None, "the session to end")
