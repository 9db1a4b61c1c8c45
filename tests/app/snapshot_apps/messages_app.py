"""The console with a few notifications of each severity, for the message log snapshots.

The log's clock starts at a fixed local time and moves 7 s a notification, so the times
shown are the same on every run and in every time zone; its entries are cut at 400
characters, so one shows the note that says so. The console's own start-up warning (no
model: the backend is `none`) is the first entry.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from pathlib import Path

from textual.pilot import Pilot

from agents.settings import Settings
from app import console
from app.message_log import MessageLog
from storage import TraceStore

START = time.mktime((2026, 3, 14, 9, 26, 53, 0, 0, -1))
ABORTED = (
    "session 1 aborted after 2 ticks: the sandbox raised\n"
    "Traceback (most recent call last):\n"
    '  File "action.py", line 3, in action_read_config\n'
    '    with open("settings.toml") as infile:\n'
    "FileNotFoundError: [Errno 2] No such file or directory: 'settings.toml'\n"
    "The agent was stopped; its blocks so far are stored and can be labelled."
)
LONG_WARNING = (
    "unknown key binding id main.stpe, main.rnu in the keys setting (known: "
    + ", ".join(f"main.action_{n}" for n in range(40))
    + ")"
)


class MessagesSnapshotApp(console.ConsoleApp):
    # The plugin resolves a relative CSS_PATH against this file, not app/console.py.
    CSS_PATH = str(Path(console.__file__).parent / "screens" / "main.tcss")

    def __init__(self) -> None:
        self.folder = tempfile.TemporaryDirectory()
        super().__init__(
            store=TraceStore(Path(self.folder.name) / "t.db"), settings=Settings(backend="none")
        )
        ticks = itertools.count()
        self.message_log = MessageLog(longest=400, clock=lambda: START + 7 * next(ticks))

    def on_unmount(self) -> None:
        self.store.close()
        self.folder.cleanup()


async def notify_and_open(pilot: Pilot[None]) -> None:
    """One notification of each kind after the start-up warning, then `m`."""
    app = pilot.app
    await pilot.pause()
    app.notify("job 3 (sft-vigenere): completed", markup=False)
    app.notify(LONG_WARNING, severity="warning", markup=False)
    app.notify(ABORTED, title="session 1 aborted", severity="error", markup=False)
    app.notify("1 SFT examples, 0 DPO pairs", title="labels", markup=False)
    await pilot.pause()
    await pilot.press("m")
    await pilot.pause()
