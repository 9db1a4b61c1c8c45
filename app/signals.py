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
import signal
import threading
from collections.abc import Iterator
from types import FrameType

#: The signals that end a run (SIGINT is Python's own KeyboardInterrupt already).
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


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
