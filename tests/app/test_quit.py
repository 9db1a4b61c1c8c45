"""Quitting with a session under way, in each state it can be in: the console stops the
session (stored aborted, the operator's quitting its reason) and ends within 2 s. Before,
the session's thread went on waiting for an operator who was gone and the process never
exited (the asyncio runner waits for its worker threads)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widgets import Input

from app.console import ConsoleApp
from app.live import LiveSession
from app.widgets.status_bar import StatusBar
from app.widgets.trace_tree import TraceTree
from storage import SessionStatus, TraceStore
from tests.app.test_live import SIZE, asking, settings, type_text, until
from tests.support.answer_task import TASK

pytestmark = pytest.mark.timeout(300)
QUIT_WITHIN = 2.0
REASON = "the operator quit the console"
#: the first approval request comes sooner
FAST = {"candidates": 1, "block_tokens": 16}
ROOT = Path(__file__).resolve().parents[2]


async def quit_and_check(app: ConsoleApp, pilot: object, key: str, store: TraceStore) -> None:
    live = app.main.live
    assert isinstance(live, LiveSession)
    session_id = live.session_id
    started = time.monotonic()
    await pilot.press(key)  # type: ignore[attr-defined]
    # a plain sleep, not pilot.pause: the pilot waits for every widget to take a message,
    # and a widget closing as the app exits can take it and never run it (a 30 s timeout)
    while app.is_running and time.monotonic() - started < 10:
        await asyncio.sleep(0.02)
    assert live.ended.wait(max(0.0, QUIT_WITHIN - (time.monotonic() - started))), (
        f"the session still ran {QUIT_WITHIN} s after {key}"
    )
    assert not app.is_running
    assert time.monotonic() - started < QUIT_WITHIN
    assert app.return_code == 0
    stored = store.get_session(session_id)
    assert stored.status is SessionStatus.ABORTED
    assert stored.settings["status_reason"] == REASON


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


async def test_quit_while_the_approval_panel_asks(store: TraceStore, tiny_model_dir: Path) -> None:
    app = ConsoleApp(store=store, settings=settings(tiny_model_dir, **FAST), task=TASK)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: asking(app), "an approval request")
        await quit_and_check(app, pilot, "ctrl+q", store)


async def test_quit_with_the_decision_set_aside(store: TraceStore, tiny_model_dir: Path) -> None:
    app = ConsoleApp(store=store, settings=settings(tiny_model_dir, **FAST), task=TASK)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: asking(app), "an approval request")
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is app.main, "the panel set aside")
        await quit_and_check(app, pilot, "q", store)


@pytest.mark.parametrize("paused", [False, True], ids=["waiting-for-a-step", "paused"])
async def test_quit_while_it_waits_for_a_step_or_is_paused(
    store: TraceStore, tiny_model_dir: Path, paused: bool
) -> None:
    app = ConsoleApp(store=store, settings=settings(tiny_model_dir, approval="auto"))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.workbench.backend is not None, "the model to load")
        tree = app.main.query_one(TraceTree)
        tree.focus()
        await pilot.pause()
        await pilot.press("s")  # the next session starts in step mode
        chat = app.main.query_one("#chat-input", Input)
        chat.focus()
        await pilot.pause()
        await type_text(pilot, "Write 42 to answer.txt")
        await pilot.press("enter")
        status = app.main.query_one(StatusBar)
        await until(pilot, lambda: status.mode.startswith("step: next"), "the agent to wait")
        tree.focus()
        await pilot.pause()
        if paused:
            await pilot.press("p")
            assert status.mode == "paused"
        await quit_and_check(app, pilot, "q", store)


@pytest.mark.parametrize("cancelled", [False, True])
def test_the_exit_deadline_ends_a_process_that_is_stuck(tmp_path: Path, cancelled: bool) -> None:
    """A process whose main thread waits for ever (as the console's did, its terminal gone,
    on Textual's dead output thread) ends with the deadline's code and a line in the log;
    a cancelled deadline leaves it alone."""
    script = f"""
import logging, sys, threading
logging.basicConfig(filename={str(tmp_path / "log")!r})
from app.signals import exit_after
timer = exit_after(0.5, 3)
if {cancelled}:
    timer.cancel()
    threading.Event().wait(1.5)
    sys.exit(0)
threading.Event().wait()
"""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, timeout=30, capture_output=True, check=False
    )
    assert done.returncode == (0 if cancelled else 3), done.stderr
    assert time.monotonic() - started < 15
    written = (tmp_path / "log").read_text() if (tmp_path / "log").exists() else ""
    assert ("had not ended 0.5 s after an ending signal" in written) is not cancelled
