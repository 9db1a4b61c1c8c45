"""What a live session tells the screen that runs it, as Textual messages.

`LiveSession` posts them from the runtime's thread (`post_message` is thread-safe): one
message class per kind of runtime event, each carrying the typed event and the session it
came from, and `ApprovalRequested` carrying the request whose Future the operator's
decision resolves. A screen handles the kinds it shows with `on_live_...` methods, or all
of them with `@on(LiveEvent)`. They don't bubble: they are for the screen that runs the
session.

`UseAdapter` is a screen asking the console to switch the model's adapter; it bubbles up
to the app.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

from agents.events import (
    AgentMessage,
    ApprovalNeeded,
    BlockSampled,
    DecisionRecorded,
    EvaluationRecorded,
    NodeChanged,
    RuntimeEvent,
    SamplingProgress,
    SessionStarted,
    StatusChanged,
    StepWaiting,
)

if TYPE_CHECKING:
    from agents.approval import ApprovalRequest
    from agents.workbench import LiveRun


@dataclass
class LiveEvent(Message, bubble=False):
    """A runtime event from `live`'s session."""

    live: LiveRun
    event: RuntimeEvent


@dataclass
class LiveSessionStarted(LiveEvent, bubble=False):
    event: SessionStarted


@dataclass
class LiveNodeChanged(LiveEvent, bubble=False):
    event: NodeChanged


@dataclass
class LiveStatusChanged(LiveEvent, bubble=False):
    event: StatusChanged


@dataclass
class LiveAgentMessage(LiveEvent, bubble=False):
    event: AgentMessage


@dataclass
class LiveEvaluationRecorded(LiveEvent, bubble=False):
    event: EvaluationRecorded


@dataclass
class LiveDecisionRecorded(LiveEvent, bubble=False):
    event: DecisionRecorded


@dataclass
class LiveApprovalNeeded(LiveEvent, bubble=False):
    event: ApprovalNeeded


@dataclass
class LiveStepWaiting(LiveEvent, bubble=False):
    event: StepWaiting


@dataclass
class LiveSamplingProgress(LiveEvent, bubble=False):
    event: SamplingProgress

    def can_replace(self, message: Message) -> bool:
        # a newer sampling report of the same session supersedes this one
        return isinstance(message, LiveSamplingProgress) and message.live is self.live


@dataclass
class LiveBlockSampled(LiveEvent, bubble=False):
    event: BlockSampled


@dataclass
class ApprovalRequested(Message, bubble=False):
    """`live`'s agent waits for the operator to decide on `request`."""

    live: LiveRun
    request: ApprovalRequest


@dataclass
class UseAdapter(Message):
    """Switch the model to the registered adapter `name` (None: the base model)."""

    name: str | None


_MESSAGES: dict[type[RuntimeEvent], type[LiveEvent]] = {
    SessionStarted: LiveSessionStarted,
    NodeChanged: LiveNodeChanged,
    StatusChanged: LiveStatusChanged,
    AgentMessage: LiveAgentMessage,
    EvaluationRecorded: LiveEvaluationRecorded,
    DecisionRecorded: LiveDecisionRecorded,
    ApprovalNeeded: LiveApprovalNeeded,
    StepWaiting: LiveStepWaiting,
    SamplingProgress: LiveSamplingProgress,
    BlockSampled: LiveBlockSampled,
}


def live_message(live: LiveRun, event: RuntimeEvent) -> LiveEvent:
    """The message for `event` (an event's subclass, such as `MemoryOff`, gets its base
    kind's message; an unknown kind the plain `LiveEvent`)."""
    for kind in type(event).__mro__:
        message = _MESSAGES.get(kind)
        if message is not None:
            return message(live, event)
    return LiveEvent(live, event)
