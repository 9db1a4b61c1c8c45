"""What a running session reports to its listener, one step at a time.

The runtime calls its listener with an `Event` from its own thread; the console turns
them into messages, `--query` prints them and `--query --json` writes `as_json()` of
each, one a line. Nothing here imports Textual.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from storage import Node


@dataclass(frozen=True, slots=True)
class Event:
    """One step of a session, JSON-safe: `kind` is node, decision, evaluation, message,
    approval, status or step (a stepping agent waits for the operator); `data` holds the
    fields."""

    kind: str
    session_id: int
    data: dict[str, Any]
    #: for node events, the stored block itself (in-process listeners; not in the JSON)
    node: Node | None = None

    def as_json(self) -> dict[str, Any]:
        return {"event": self.kind, "session": self.session_id, **self.data}


Listener = Callable[[Event], None]
