"""Waiting on a Pilot-driven app, and reading what a widget shows, for the app tests."""

from __future__ import annotations

import io
import time
from collections.abc import Callable

from rich.console import Console
from textual.notifications import Notification, Notify
from textual.pilot import Pilot
from textual.widgets import Static
from textual.worker import WorkerState


async def settle(pilot: Pilot[None]) -> None:
    """Until no worker runs: a finished worker may have started another (a label starts
    a recount, a poll starts right after another ends), so one wait is not always enough."""
    for _ in range(50):
        await pilot.pause()
        busy = [
            w for w in pilot.app.workers if w.state in (WorkerState.PENDING, WorkerState.RUNNING)
        ]
        if not busy:
            await pilot.pause()
            return
        await pilot.app.workers.wait_for_complete()
    raise AssertionError("workers kept starting")


async def until(
    pilot: Pilot[None], condition: Callable[[], bool], what: str, timeout: float = 60
) -> None:
    """Until `condition()` holds; an AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} (screen {pilot.app.screen})")
        await pilot.pause(0.05)


def plain(widget: Static) -> str:
    """A Static's content as plain text, lines up to 300 cells wide."""
    console = Console(width=300, file=io.StringIO(), color_system=None)
    with console.capture() as captured:
        console.print(widget.content)
    return captured.get()


class Notes:
    """Every notification the app posts, caught with run_test's public message_hook."""

    def __init__(self) -> None:
        self.all: list[Notification] = []

    def __call__(self, message: object) -> None:
        if isinstance(message, Notify):
            self.all.append(message.notification)

    @property
    def seen(self) -> list[Notification]:
        return self.all

    def texts(self) -> list[str]:
        return [note.message for note in self.all]

    def text(self) -> str:
        return "\n".join(self.texts())

    def of(self, severity: str) -> list[str]:
        return [n.message for n in self.all if n.severity == severity]
