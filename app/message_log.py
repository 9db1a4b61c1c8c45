"""Every notification of the session, kept in full for the message log screen.

A toast is cut at the pane's edge and gone in seconds; the log keeps its time, severity,
title and whole text (app.screens.messages shows it). Memory is bounded: the newest
`LIMIT` entries, each text cut at `LONGEST` characters, so a huge paste that ends up in a
notification is not kept twice.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

#: The most entries kept; older ones are dropped first.
LIMIT = 1_000
#: The most characters of one entry's message (and of its title) kept.
LONGEST = 100_000


@dataclass(frozen=True, slots=True)
class LoggedMessage:
    """One notification as it was raised."""

    #: its place in the session's notifications, from 1 (dropped ones keep their number)
    number: int
    #: Unix time it was raised
    at: float
    #: Textual's severity: "information", "warning" or "error"
    severity: str
    title: str
    #: the text, at most `LONGEST` characters of it
    message: str
    #: the characters of the message not kept (0: it is whole)
    cut: int = 0
    #: the message is Textual content markup, not plain text
    markup: bool = False


class MessageLog:
    """The notifications of a session, oldest first.

    `add` may be called from any thread (Textual's `App.notify` is thread-safe): a lock
    keeps the numbering and the deque consistent."""

    def __init__(
        self, limit: int = LIMIT, longest: int = LONGEST, clock: Callable[[], float] = time.time
    ) -> None:
        self.longest = longest
        self.clock = clock
        self._entries: deque[LoggedMessage] = deque(maxlen=limit)
        self._lock = threading.Lock()
        #: how many notifications were ever added (the last one's number)
        self.total = 0

    def add(
        self,
        message: str,
        *,
        title: str = "",
        severity: str = "information",
        markup: bool = False,
    ) -> LoggedMessage:
        message = str(message)
        cut = max(0, len(message) - self.longest)
        with self._lock:
            self.total += 1
            entry = LoggedMessage(
                number=self.total,
                at=self.clock(),
                severity=severity,
                title=str(title)[: self.longest],
                message=message[: self.longest] if cut else message,
                cut=cut,
                markup=markup,
            )
            self._entries.append(entry)
        return entry

    def since(self, number: int) -> list[LoggedMessage]:
        """The kept entries numbered after `number`, oldest first."""
        with self._lock:
            return [e for e in self._entries if e.number > number]

    def before(self, number: int) -> list[LoggedMessage]:
        """The kept entries numbered before `number`, oldest first."""
        with self._lock:
            return [e for e in self._entries if e.number < number]

    @property
    def first(self) -> int:
        """The number of the oldest entry kept (`total + 1` when none is)."""
        with self._lock:
            return self._entries[0].number if self._entries else self.total + 1

    def __iter__(self) -> Iterator[LoggedMessage]:
        with self._lock:
            return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)
