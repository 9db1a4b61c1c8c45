"""What a tick will cost on this machine, said once the session's first block is in: the
real model on a CPU took ~7 minutes a tick with the defaults, and nothing said so."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.notifications import Notify

from agents import speed
from agents.backends.transformers_backend import TransformersBackend
from agents.events import BlockSampled, SessionStarted
from agents.settings import Settings
from agents.workbench import Workbench
from app import live_control
from app.console import ConsoleApp
from app.live_control import LiveControl
from storage import TraceStore
from tests.app.test_live import SIZE, chat_lines, settings, until
from tests.support.answer_task import TASK

pytestmark = pytest.mark.timeout(300)


def block(seconds: float, rate: float | None = 20.0, tick: int = 1) -> BlockSampled:
    return BlockSampled(
        session_id=1,
        block="orientation",
        tick=tick,
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


def test_a_tick_costs_at_most_its_planned_tokens_then_what_the_first_took() -> None:
    """The first block is the shortest (four times it said half of what a tick took on
    the coder): the rest of the tick is counted at its planned tokens; once the second tick's first block is in, the first tick's own time replaces it."""
    control = LiveControl(Workbench(None, Settings(backend="none")))
    control.block_tokens = 384
    told = control.sampled(block(30.0))  # 4 candidates at 20 tokens/s
    # 30 s, then 3 blocks of 4 x 384 tokens at 20 tokens/s: 30 + 230.4 s
    assert control.tick_cost == "a tick ≈ 4 min"
    assert told is not None and "takes about 4 min" in told and "384 tokens" in told
    for seconds in (50.0, 10.0, 40.0):  # the tick's other blocks
        assert control.sampled(block(seconds)) is None
    assert control.tick_cost == "a tick ≈ 4 min"
    control.sampled(block(30.0, tick=2))
    assert control.tick_cost == "a tick ≈ 2 min"  # 30 + 50 + 10 + 40 s
    control.sampled(block(500.0, tick=2))
    control.sampled(block(30.0, tick=3))
    assert control.tick_cost == "a tick ≈ 2 min"  # the first tick's, once


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


async def test_the_next_sessions_first_line_says_what_a_tick_cost_here(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """The first session's line can only say when the cost will be known; its first block
    is kept beside the store, and the next session's line (and the status bar, before
    that session's own first block) says what a tick cost here."""
    with TraceStore(tmp_path / "traces.db") as store:
        first_lines = [await chat_of_one_session(store, tiny_model_dir, ticks) for ticks in (1, 2)]
        third_line = await chat_of_one_session(store, tiny_model_dir, 1)
    assert "shows once its first block is written" in first_lines[0]
    assert (
        "A tick takes about" in first_lines[1] and "1 candidate of a block took" in first_lines[1]
    )
    # the second session ran a whole tick and a block of the next: the third says that tick
    assert "A tick took about" in third_line and "of the model's time" in third_line
    kept = speed.recalled(tmp_path / speed.SPEED_FILE, str(tiny_model_dir), "cpu")
    assert kept is not None and kept.candidates >= 1 and kept.day == speed.today()
    assert kept.tick_seconds is not None and kept.tick_seconds >= kept.seconds
    # until the session's own first block is in, the status bar says the last figure
    with TraceStore(tmp_path / "traces.db") as store:
        bench = Workbench(store, Settings(backend="none"))
        bench.backend = TransformersBackend(str(tiny_model_dir))
        control = LiveControl(bench)
        control.started(SessionStarted(session_id=4, text="session 4", options={}))
        assert control.tick_cost.endswith("(last time)")
        control.sampled(block(2.0))
        assert control.tick_cost == "a tick ≈ 8 s"
        bench.backend.close()


async def chat_of_one_session(store: TraceStore, model: Path, ticks: int = 1) -> str:
    """The chat pane's text once one session of the console has run to its end."""
    chosen = settings(model, approval="auto", max_ticks=ticks, candidates=1, block_tokens=16)
    app = ConsoleApp(store=store, settings=chosen, task=TASK)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: any("session " in ln for ln in chat_lines(app)), "the line")
        await until(pilot, lambda: app.main.live is None, "the session to end")
        return "".join(chat_lines(app))


def test_the_speed_file_is_only_a_hint(tmp_path: Path) -> None:
    where = tmp_path / speed.SPEED_FILE
    assert speed.recalled(where, "m", "cpu") is None  # none kept yet
    where.write_text("{not json")
    assert speed.recalled(where, "m", "cpu") is None  # unreadable: no hint, no error
    measured = speed.Measured(4, 90.0, 12.5, "2026-11-27")
    speed.remember(where, "m", "cpu", measured)
    speed.remember(where, "other", "cpu", speed.Measured(2, 1.0, None, "2026-11-27"))
    assert speed.recalled(where, "m", "cpu") == measured
    assert speed.recalled(where, "m", "cuda") is None  # another device is another speed
    assert [p.name for p in tmp_path.iterdir()] == [speed.SPEED_FILE]  # no temp file left
    assert speed.speed_file("sqlite:///:memory:") is None
    assert speed.speed_file(f"sqlite:///{tmp_path}/traces.db") == where
