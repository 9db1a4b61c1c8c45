"""Full garbage collections while the operator is not typing.

Textual leaves a lot of cyclic garbage behind on every frame (a `Strip` that crops to
itself caches itself, so each drawn line is a cycle), and Python's automatic full
collection then runs every couple of seconds in the middle of whatever comes next: a
key, or a block arriving from the agent, drew its frame 50-70 ms late where it took
17 ms (bench/tui.py, 10,000 blocks, one in twelve live blocks; the collections took
15-57 ms, growing with the heap). The young generations still collect as usual; the
full one waits for a quiet moment, and waits at most `LONGEST` seconds, so memory stays
bounded in a console that is never quiet.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

#: Young collections between two full ones: Python's own default third threshold.
FULL_EVERY = 10
#: How long without a key or a click counts as quiet.
QUIET = 0.5
#: A full collection is never put off longer than this.
LONGEST = 30.0
#: The third threshold while the collector is on: the interpreter never reaches it.
DEFERRED = 1 << 30
#: How often the app asks `tick` (seconds).
EVERY = 0.25


class IdleCollector:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._saved: tuple[int, int, int] | None = None
        self.last_input = self.last_full = clock()
        #: full collections run here, for tests and the curious
        self.runs = 0

    @property
    def active(self) -> bool:
        return self._saved is not None

    def start(self) -> None:
        """Put the interpreter's own full collections off (young ones unchanged)."""
        if self._saved is None:
            self._saved = gc.get_threshold()
            gc.set_threshold(self._saved[0], self._saved[1], DEFERRED)

    def stop(self) -> None:
        """The interpreter's thresholds back as they were."""
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None

    def touched(self) -> None:
        """The operator pressed a key or used the mouse."""
        self.last_input = self._clock()

    def due(self) -> bool:
        """A full collection is owed (as many young ones as the interpreter waits for) and
        either the operator is quiet or it has waited `LONGEST`."""
        if not self.active or not gc.isenabled() or gc.get_count()[2] < FULL_EVERY:
            return False
        now = self._clock()
        return now - self.last_input >= QUIET or now - self.last_full >= LONGEST

    def tick(self) -> bool:
        """Collect when due; whether it did."""
        if not self.due():
            return False
        gc.collect()
        self.last_full = self._clock()
        self.runs += 1
        return True
