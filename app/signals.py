"""SIGTERM and SIGHUP end a headless run the way Ctrl-C does.

Python turns SIGINT into KeyboardInterrupt in the main thread, so a session stopped with
Ctrl-C is stored as aborted and can be resumed. SIGTERM (`kill`, systemd, a batch
scheduler) and SIGHUP (the terminal went away) would otherwise kill the process where it
stands and leave its session `running`. Here they raise `Terminated`, a KeyboardInterrupt
that names the signal, in the main thread: between two forward passes of a long
`generate`, or out of the poll that waits for the sandboxed kernel. The runtime stores
its text as the session's reason. In the console, `agents.workbench.RunningSessions` stops every session
it runs (the live one, an A/B's, a held-out comparison's) the same way.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

#: The signals that end a run (SIGINT is Python's own KeyboardInterrupt already).
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

log = logging.getLogger(__name__)


class Terminated(KeyboardInterrupt):
    """A signal ended the run; `str()` is the session's reason ("stopped by SIGTERM")."""


@contextlib.contextmanager
def ending_on_signals(signals: tuple[signal.Signals, ...] = ENDING_SIGNALS) -> Iterator[None]:
    """While inside, the first of `signals` raises `Terminated` in the main thread. Later
    ones are ignored: the run is already ending, and its last writes (the session's status,
    the kernel's shutdown) must not be cut short; SIGKILL still ends it at once. Outside
    the main thread (a test calling the command in a thread) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def handler(signum: int, frame: FrameType | None) -> None:
        nonlocal raised
        if raised:
            return
        raised = True
        raise Terminated(f"stopped by {signal.Signals(signum).name}")

    previous = {signum: signal.signal(signum, handler) for signum in signals}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def exit_after(seconds: float, code: int) -> threading.Timer:
    """End the process with `code` in `seconds` unless the timer returned is cancelled
    first. The console arms it when an ending signal comes: where its terminal went away
    while it was drawing (the window closed, the tmux server killed), Textual's output thread
    can die on a write, and the app then waits for ever on that thread's full queue: a
    process left behind, holding its model, that only SIGKILL ends. The sessions are
    stored by then, so the deadline cuts nothing but the terminal's restore."""

    def force() -> None:
        log.warning("the console had not ended %g s after an ending signal; ending it", seconds)
        logging.shutdown()
        os._exit(code)

    timer = threading.Timer(seconds, force)
    timer.daemon = True
    timer.name = "exit deadline"
    timer.start()
    return timer
