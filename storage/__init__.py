"""The SQLite (or PostgreSQL) trace store. Imports nothing else of ours.

The records and errors load with the package; `TraceStore` (and SQLAlchemy under it)
when first named, so that the console draws its first frame before SQLAlchemy loads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from storage.checks import CheckCounts, Checked, CheckVerdict, check_verdict, count_checks
from storage.domain import (
    BATCH_TASK_OPEN,
    CHECKS_SOURCE,
    Actor,
    Adapter,
    Author,
    Batch,
    BatchStatus,
    BatchTask,
    BatchTaskStatus,
    DecidedNode,
    Decision,
    EvaluationKind,
    EvaluationResult,
    Improvement,
    Job,
    JobEvent,
    JobKind,
    JobStatus,
    Label,
    LabelledNode,
    LabelScope,
    LabelValue,
    NewNode,
    Node,
    NodeStatus,
    Session,
    SessionStatus,
    Verdict,
    with_status_reason,
)
from storage.errors import NotATraceStoreError, NotFoundError, SchemaTooNewError, StoreError

if TYPE_CHECKING:
    from storage.store import TraceStore


def __getattr__(name: str) -> Any:
    if name == "TraceStore":
        from storage.store import TraceStore

        return TraceStore
    raise AttributeError(f"module 'storage' has no attribute {name!r}")


__all__ = [
    "BATCH_TASK_OPEN",
    "CHECKS_SOURCE",
    "Actor",
    "Adapter",
    "Author",
    "Batch",
    "BatchStatus",
    "BatchTask",
    "BatchTaskStatus",
    "CheckCounts",
    "CheckVerdict",
    "Checked",
    "DecidedNode",
    "Decision",
    "EvaluationKind",
    "EvaluationResult",
    "Improvement",
    "Job",
    "JobEvent",
    "JobKind",
    "JobStatus",
    "Label",
    "LabelScope",
    "LabelValue",
    "LabelledNode",
    "NewNode",
    "Node",
    "NodeStatus",
    "NotATraceStoreError",
    "NotFoundError",
    "SchemaTooNewError",
    "Session",
    "SessionStatus",
    "StoreError",
    "TraceStore",
    "Verdict",
    "check_verdict",
    "count_checks",
    "with_status_reason",
]
