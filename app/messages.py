"""What a live session tells the screen that runs it, as Textual messages.

`LiveSession` posts them from the runtime's thread (`post_message` is thread-safe): a
`LiveEvent` carrying each runtime event (`agents.events`, told apart by its class) and the
session it came from, and `ApprovalRequested` carrying the request whose Future the
operator's decision resolves. They don't bubble: they are for the screen that runs the
session.

`UseAdapter` is a screen asking the console to switch the model's adapter; it bubbles up
to the app.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

from agents.events import RuntimeEvent, SamplingProgress

if TYPE_CHECKING:
    from agents.approval import ApprovalRequest
    from agents.workbench import LiveRun


@dataclass
class LiveEvent(Message, bubble=False):
    """A runtime event from `live`'s session; a screen tells the kinds apart by the
    event's class."""

    live: LiveRun
    event: RuntimeEvent

    def can_replace(self, message: Message) -> bool:
        # a newer sampling report of the same session supersedes this one
        return (
            isinstance(self.event, SamplingProgress)
            and isinstance(message, LiveEvent)
            and isinstance(message.event, SamplingProgress)
            and message.live is self.live
        )


@dataclass
class ApprovalRequested(Message, bubble=False):
    """`live`'s agent waits for the operator to decide on `request`."""

    live: LiveRun
    request: ApprovalRequest


@dataclass
class UseAdapter(Message):
    """Switch the model to the registered adapter `name` (None: the base model)."""

    name: str | None
