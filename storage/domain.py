"""Plain domain records handed out by the trace store.

The ORM rows in `storage.models` never leave `storage/`: callers get these frozen
dataclasses, so a detached row can't lazy-load behind their back and the rest of the
code doesn't depend on SQLAlchemy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class SessionStatus(StrEnum):
    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    ABORTED = "aborted"
    TRUNCATED = "truncated"


class NodeStatus(StrEnum):
    PROPOSED = "proposed"
    CHOSEN = "chosen"
    ALTERNATE = "alternate"
    APPROVED = "approved"
    EDITED = "edited"
    REJECTED = "rejected"
    EXECUTED = "executed"
    FAILED = "failed"


class Author(StrEnum):
    MODEL = "model"
    OPERATOR = "operator"
    RUNTIME = "runtime"


class Verdict(StrEnum):
    APPROVE = "approve"
    EDIT = "edit"
    REJECT = "reject"
    PICK_ALTERNATE = "pick_alternate"
    #: the operator asked for new candidates; the proposed action stays as an alternate
    REGENERATE = "regenerate"


class Actor(StrEnum):
    OPERATOR = "operator"
    POLICY = "policy"


class LabelValue(StrEnum):
    GOOD = "good"
    BAD = "bad"


class LabelScope(StrEnum):
    BLOCK = "block"
    PATH = "path"


class EvaluationKind(StrEnum):
    CALLBACK = "callback"
    LOGIT = "logit"
    OBSERVATION = "observation"


class JobKind(StrEnum):
    SFT = "sft"
    DPO = "dpo"
    KTO = "kto"


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"


class BatchStatus(StrEnum):
    RUNNING = "running"
    #: every task ran to an end (completed, failed or truncated)
    COMPLETED = "completed"
    #: stopped (Ctrl-C) with tasks left: `batch --resume` runs them
    ABORTED = "aborted"


class BatchTaskStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    TRUNCATED = "truncated"
    #: stopped midway: a resumed batch continues its session
    ABORTED = "aborted"


#: Task statuses a run of the batch still has to take up.
BATCH_TASK_OPEN = frozenset({BatchTaskStatus.PENDING, BatchTaskStatus.ABORTED})


@dataclass(frozen=True, slots=True)
class Session:
    id: int
    title: str
    task: str
    backend: str | None
    model: str | None
    adapter: str | None
    settings: dict[str, Any]
    status: SessionStatus
    created_at: float
    updated_at: float

    @property
    def status_reason(self) -> str:
        """Why the status last changed ("" when no reason was given)."""
        return str(self.settings.get(STATUS_REASON) or "")


#: The settings key that holds why a session's status last changed.
STATUS_REASON = "status_reason"


def with_status_reason(settings: dict[str, Any], reason: str) -> dict[str, Any]:
    """`settings` with `reason` as the reason for the status ("" removes it)."""
    kept = {k: v for k, v in settings.items() if k != STATUS_REASON}
    return {**kept, STATUS_REASON: reason} if reason else kept


@dataclass(frozen=True, slots=True)
class NewNode:
    """A node to add. `parent_id` names a stored node; `parent_index` instead names an
    earlier entry of the same `add_nodes` batch, so a whole subtree goes in one call."""

    kind: str
    text: str
    tick: int = 0
    parent_id: int | None = None
    parent_index: int | None = None
    author: Author = Author.MODEL
    status: NodeStatus = NodeStatus.PROPOSED
    score: float | None = None
    score_parts: dict[str, float] = field(default_factory=dict)
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    edited_from_id: int | None = None
    truncated: bool = False
    prompt_hash: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def rewrite_of(cls, original: Node, text: str, status: NodeStatus, **fields: Any) -> NewNode:
        """The operator's text for `original`: a sibling written after the same prompt, its
        header's fields kept (index, timestamp, question, collapsed context); `fields` add to
        it (`meta` merges into the kept fields)."""
        meta = {k: v for k, v in original.meta.items() if k in REWRITE_META}
        meta.update(fields.pop("meta", {}))
        return cls(
            kind=original.kind,
            text=text,
            tick=original.tick,
            parent_id=original.parent_id,
            author=Author.OPERATOR,
            status=status,
            edited_from_id=original.id,
            prompt_hash=original.prompt_hash,
            meta=meta,
            **fields,
        )


#: The metadata of a block's header that an operator's rewrite of it keeps (with how it was
#: asked for: the same prompt, the same form).
REWRITE_META = ("index", "timestamp", "q", "collapsed", "prompt", "form")


@dataclass(frozen=True, slots=True)
class Node:
    id: int
    session_id: int
    parent_id: int | None
    tick: int
    kind: str
    text: str
    author: Author
    status: NodeStatus
    score: float | None
    score_parts: dict[str, float]
    sampling: dict[str, Any]
    edited_from_id: int | None
    truncated: bool
    prompt_hash: str | None
    meta: dict[str, Any]
    created_at: float
    updated_at: float
    # Completion tokens are large; tree loads leave them out unless asked.
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    id: int
    node_id: int
    verdict: Verdict
    reason: str | None
    actor: Actor
    result_node_id: int | None
    created_at: float


@dataclass(frozen=True, slots=True)
class Label:
    id: int
    node_id: int
    value: LabelValue
    scope: LabelScope
    note: str | None
    created_at: float
    retracted_at: float | None
    #: None: the operator gave it; else what did (`CHECKS_SOURCE`: the task's own checks). An
    #: operator's label on a node outranks every automatic one there, however new.
    source: str | None = None

    @property
    def automatic(self) -> bool:
        return self.source is not None


#: The source of the labels that the task's own checks give (`agent-console improve`).
CHECKS_SOURCE = "checks"


@dataclass(frozen=True, slots=True)
class EvaluationResult:
    id: int
    node_id: int
    name: str
    kind: EvaluationKind
    result: Any
    passed: bool | None
    error: str | None
    duration: float | None
    created_at: float


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    kind: JobKind
    name: str
    status: JobStatus
    base_model: str | None
    config: dict[str, Any]
    progress: float
    metrics: dict[str, Any]
    pid: int | None
    error: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    updated_at: float


@dataclass(frozen=True, slots=True)
class JobEvent:
    id: int
    job_id: int
    kind: str
    step: int | None
    message: str | None
    data: dict[str, Any]
    created_at: float


@dataclass(frozen=True, slots=True)
class Adapter:
    id: int
    name: str
    base_model: str
    path: str
    job_id: int | None
    metrics: dict[str, Any]
    created_at: float


@dataclass(frozen=True, slots=True)
class LabelledNode:
    """A node with its effective label: the latest one not retracted."""

    node: Node
    label: Label


@dataclass(frozen=True, slots=True)
class DecidedNode:
    node: Node
    decision: Decision


@dataclass(frozen=True, slots=True)
class Batch:
    id: int
    name: str
    #: the tasks file it was read from, and the hash of its content
    source: str
    source_hash: str
    status: BatchStatus
    #: workers, approval policy, backend, model, adapter, Ray address
    config: dict[str, Any]
    created_at: float
    updated_at: float
    finished_at: float | None


@dataclass(frozen=True, slots=True)
class BatchTask:
    id: int
    batch_id: int
    #: the task's number in the tasks file (from 1; blank and comment lines not counted)
    line: int
    spec: dict[str, Any]
    status: BatchTaskStatus
    session_id: int | None
    worker: str | None
    #: how many times a worker took it up (more than 1 only when a stopped batch resumed)
    runs: int
    #: ticks, tokens, checks passed and run, reward, seconds
    result: dict[str, Any]
    error: str | None
    started_at: float | None
    finished_at: float | None
    updated_at: float


@dataclass(frozen=True, slots=True)
class Improvement:
    """A run of `agent-console improve` on one task family."""

    id: int
    family: str
    #: running (or killed while running: resumable), completed, aborted
    status: str
    #: rounds, sessions per round, workers, model, held-out size, ...
    config: dict[str, Any]
    #: the rounds so far, each with its steps' results (`training.improve`), and the
    #: adapter in use now
    state: dict[str, Any]
    created_at: float
    updated_at: float
