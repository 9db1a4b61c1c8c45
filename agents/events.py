"""What a running session reports to its listener: one frozen dataclass per kind of step.

The runtime calls its listener with these from its own thread. The console wraps them in
Textual messages (`app.messages`), `--query` prints a line for some, and `--query --json`
writes `as_json()` of each, one a line: `{"event": KIND, "session": id, ...fields}`, the
fields in the order they are declared (a field's `json` metadata renames it there, and
enums are written as their values). Nothing here imports Textual.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, ClassVar

from agents import blocks
from storage import Actor, Author, EvaluationKind, Node, NodeStatus, SessionStatus, Verdict


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeEvent:
    """One step of a session (0 until the session is stored)."""

    #: the event's name in the JSON stream
    KIND: ClassVar[str] = ""

    session_id: int

    def as_json(self) -> dict[str, Any]:
        return {"event": self.KIND, "session": self.session_id, **self.json_fields()}

    def json_fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "session_id":
                continue
            value = getattr(self, f.name)
            out[f.metadata.get("json", f.name)] = value.value if isinstance(value, Enum) else value
        return out


Listener = Callable[[RuntimeEvent], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionStarted(RuntimeEvent):
    """The session is stored and about to run: its first line and the options it uses."""

    KIND: ClassVar[str] = "start"

    #: the model, where it runs, the sampling choices
    text: str
    options: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeChanged(RuntimeEvent):
    """A block was stored, or its status (and call result) changed."""

    KIND: ClassVar[str] = "node"

    node: Node

    def json_fields(self) -> dict[str, Any]:
        node = self.node
        return {
            "id": node.id,
            "parent": node.parent_id,
            "tick": node.tick,
            "kind": node.kind,
            "author": node.author.value,
            "status": node.status.value,
            "score": node.score,
            "truncated": node.truncated,
            "text": node.text,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusChanged(RuntimeEvent):
    KIND: ClassVar[str] = "status"

    status: SessionStatus
    reason: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentMessage(RuntimeEvent):
    """Words for the operator: the agent's `tell_operator`, or its last word when it says
    it is done (`finished`)."""

    KIND: ClassVar[str] = "message"

    text: str
    finished: bool = False

    def json_fields(self) -> dict[str, Any]:
        return {"text": self.text, "finished": True} if self.finished else {"text": self.text}


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryOff(AgentMessage):
    """Retrieval memory failed and is off for the rest of the session: said to the
    operator like a message (`"memory": false` in the JSON)."""

    def json_fields(self) -> dict[str, Any]:
        return {"text": self.text, "memory": False}


@dataclass(frozen=True, slots=True, kw_only=True)
class EvaluationRecorded(RuntimeEvent):
    """A callback's, an observation view's or the evaluator's result, stored on a block."""

    KIND: ClassVar[str] = "evaluation"

    node_id: int = field(metadata={"json": "node"})
    name: str
    kind: EvaluationKind
    result: Any
    passed: bool | None
    error: str | None
    duration: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionRecorded(RuntimeEvent):
    """The approval gate's verdict on an action, stored."""

    KIND: ClassVar[str] = "decision"

    node_id: int = field(metadata={"json": "node"})
    verdict: Verdict
    actor: Actor
    reason: str | None
    #: the operator's edit or the picked alternate that runs instead
    result_node_id: int | None = field(metadata={"json": "result_node"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalNeeded(RuntimeEvent):
    """The action waits for the operator (the request itself goes to the asker)."""

    KIND: ClassVar[str] = "approval"

    node_id: int = field(metadata={"json": "node"})
    why: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StepWaiting(RuntimeEvent):
    """A stepping agent waits for the operator before its next block or tick."""

    KIND: ClassVar[str] = "step"

    #: "block" or "tick"
    unit: str
    #: what comes next: a block's kind, or "tick N"
    upcoming: str = field(metadata={"json": "next"})


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingProgress(RuntimeEvent):
    """A block's candidates are being sampled: the first one's text so far."""

    KIND: ClassVar[str] = "sampling"

    block: str
    tick: int
    candidates: int
    tokens: int
    seconds: float
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockSampled(RuntimeEvent):
    """A round of a block's candidates is sampled: how many, and how fast."""

    KIND: ClassVar[str] = "sampled"

    block: str
    tick: int
    candidates: int
    tokens: int
    seconds: float
    tokens_per_second: float | None


#: The statuses of a block that a progress line reports.
SHOWN_STATUSES = (NodeStatus.CHOSEN, NodeStatus.EXECUTED, NodeStatus.FAILED)


def candidates(n: int) -> str:
    """`n` candidates in words: "1 candidate", "2 candidates"."""
    return f"{n} candidate" if n == 1 else f"{n} candidates"


def progress_line(event: RuntimeEvent) -> str | None:
    """`event` as the one line `--query` prints for it (the console's A/B columns show
    the same); None for an event it does not print."""
    match event:
        case SessionStarted():
            return event.text
        case BlockSampled():
            rate = event.tokens_per_second
            speed = f", {rate:.0f} tokens/s" if rate else ""
            return (
                f"tick {event.tick} {event.block}: {candidates(event.candidates)}, "
                f"{event.tokens} tokens in {event.seconds:.1f} s{speed}"
            )
        case NodeChanged(node=node) if node.status in SHOWN_STATUSES:
            if node.author is Author.RUNTIME and node.kind not in (
                blocks.ERROR,
                blocks.OUTCOME,
            ):
                return None
            score = f" score {node.score:.2f}" if node.score is not None else ""
            cut = " (truncated)" if node.truncated else ""
            return f"tick {node.tick} {node.kind} {node.status.value}{score}{cut}"
        case DecisionRecorded():
            reason = f": {event.reason}" if event.reason else ""
            return f"  {event.actor.value} {event.verdict.value}{reason}"
        case EvaluationRecorded(kind=EvaluationKind.CALLBACK):
            verdict = "passed" if event.passed else "failed"
            return f"  {event.name}: {verdict}"
        case AgentMessage():
            return f"agent: {event.text}"
        case StatusChanged():
            reason = f" ({event.reason})" if event.reason else ""
            return f"session {event.session_id}: {event.status.value}{reason}"
    return None
