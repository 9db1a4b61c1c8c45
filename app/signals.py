"""SIGTERM and SIGHUP end a headless run the way Ctrl-C does.

Python turns SIGINT into KeyboardInterrupt in the main thread, so a session stopped with
Ctrl-C is stored as aborted and can be resumed. SIGTERM (`kill`, systemd, a batch
scheduler) and SIGHUP (the terminal went away) would otherwise kill the process where it
stands and leave its session `running`. Here they raise `Terminated`, a KeyboardInterrupt
that names the signal, in the main thread: between two forward passes of a long
`generate`, or out of the poll that waits for the sandboxed kernel. The runtime stores
its text as the session's reason. In the console, `RunningSessions` stops every session
it runs (the live one, an A/B's, a held-out comparison's) the same way.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agents.runtime import Runtime

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


class RunningSessions:
    """Every session the console runs now: the live one, an A/B's two sides, a held-out
    comparison's current one. An ending signal stops them all with its reason and waits
    for their ends to be stored; once it has, no new one starts (`running` refuses)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._runs: set[Runtime] = set()
        self._closed = False

    @contextlib.contextmanager
    def running(self, runtime: Runtime) -> Iterator[bool]:
        """While the body runs `runtime`, it is one of the console's sessions. Yields
        False (and the body should not run it) once the console is ending."""
        with self._changed:
            if self._closed:
                yield False
                return
            self._runs.add(runtime)
        try:
            yield True
        finally:
            with self._changed:
                self._runs.discard(runtime)
                self._changed.notify_all()

    def stop_all(self, reason: str, timeout: float) -> int:
        """Stop every running session with `reason` and wait (up to `timeout` seconds)
        until each has stored its end; no session starts afterwards. Returns how many
        were still running at the deadline."""
        deadline = time.monotonic() + timeout
        with self._changed:
            self._closed = True
            runs = list(self._runs)
        for runtime in runs:
            runtime.stop(reason)
        with self._changed:
            while self._runs and (left := deadline - time.monotonic()) > 0:
                self._changed.wait(left)
            return len(self._runs)
