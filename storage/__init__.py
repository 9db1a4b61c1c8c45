"""The SQLite (or PostgreSQL) trace store. Imports nothing else of ours."""

from __future__ import annotations

from storage.domain import (
    Actor,
    Adapter,
    Author,
    DecidedNode,
    Decision,
    EvaluationKind,
    EvaluationResult,
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
)
from storage.errors import NotATraceStoreError, NotFoundError, SchemaTooNewError, StoreError
from storage.store import TraceStore

__all__ = [
    "Actor",
    "Adapter",
    "Author",
    "DecidedNode",
    "Decision",
    "EvaluationKind",
    "EvaluationResult",
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
]
