"""Rows to domain records: the one place that knows both shapes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Row

from storage import domain as d
from storage.models import (
    AdapterRow,
    BatchRow,
    BatchTaskRow,
    DecisionRow,
    EvaluationRow,
    JobEventRow,
    JobRow,
    LabelRow,
    NodeRow,
    SessionRow,
)

SESSION_COLUMNS = tuple(SessionRow.__table__.c)
NODE_LIGHT_COLUMNS = tuple(
    c for c in NodeRow.__table__.c if c.name not in ("token_ids", "logprobs")
)
NODE_COLUMNS = (*NODE_LIGHT_COLUMNS, NodeRow.__table__.c.token_ids, NodeRow.__table__.c.logprobs)
DECISION_COLUMNS = tuple(DecisionRow.__table__.c)
LABEL_COLUMNS = tuple(LabelRow.__table__.c)
EVALUATION_COLUMNS = tuple(EvaluationRow.__table__.c)
JOB_COLUMNS = tuple(JobRow.__table__.c)
JOB_EVENT_COLUMNS = tuple(JobEventRow.__table__.c)
ADAPTER_COLUMNS = tuple(AdapterRow.__table__.c)
BATCH_COLUMNS = tuple(BatchRow.__table__.c)
BATCH_TASK_COLUMNS = tuple(BatchTaskRow.__table__.c)


def to_session(row: Row[Any]) -> d.Session:
    m = row._mapping
    return d.Session(
        id=m["id"],
        title=m["title"],
        task=m["task"],
        backend=m["backend"],
        model=m["model"],
        adapter=m["adapter"],
        settings=m["settings"] or {},
        status=d.SessionStatus(m["status"]),
        created_at=m["created_at"],
        updated_at=m["updated_at"],
    )


_NODE_FIELDS = tuple(c.name for c in NODE_LIGHT_COLUMNS)


def to_node(row: Row[Any], with_tokens: bool = False) -> d.Node:
    """Rows selected with NODE_COLUMNS (`with_tokens`) or NODE_LIGHT_COLUMNS first;
    later columns (a joined label, say) are ignored.

    Whole-tree loads build tens of thousands of these, so fields go by position rather
    than by name lookups on the row's mapping.
    """
    n = len(_NODE_FIELDS)
    tokens = (row[n], row[n + 1]) if with_tokens else (None, None)
    return node_from_values(dict(zip(_NODE_FIELDS, row, strict=False)), *tokens)


def node_from_values(
    v: Mapping[str, Any], token_ids: list[int] | None, logprobs: list[float] | None
) -> d.Node:
    return d.Node(
        id=v["id"],
        session_id=v["session_id"],
        parent_id=v["parent_id"],
        tick=v["tick"],
        kind=v["kind"],
        text=v["text"],
        author=d.Author(v["author"]),
        status=d.NodeStatus(v["status"]),
        score=v["score"],
        score_parts=v["score_parts"] or {},
        sampling=v["sampling"] or {},
        edited_from_id=v["edited_from_id"],
        truncated=bool(v["truncated"]),
        prompt_hash=v["prompt_hash"],
        meta=v["meta"] or {},
        created_at=v["created_at"],
        updated_at=v["updated_at"],
        token_ids=token_ids,
        logprobs=logprobs,
    )


def joined(row: Row[Any], columns: tuple[Any, ...]) -> Mapping[str, Any]:
    """The last len(columns) values of a joined row, by the names of `columns`."""
    return dict(zip((c.name for c in columns), row[len(row) - len(columns) :], strict=True))


def to_decision(row: Row[Any] | Mapping[str, Any]) -> d.Decision:
    m = row._mapping if isinstance(row, Row) else row
    return d.Decision(
        id=m["id"],
        node_id=m["node_id"],
        verdict=d.Verdict(m["verdict"]),
        reason=m["reason"],
        actor=d.Actor(m["actor"]),
        result_node_id=m["result_node_id"],
        created_at=m["created_at"],
    )


def to_label(row: Row[Any] | Mapping[str, Any]) -> d.Label:
    m = row._mapping if isinstance(row, Row) else row
    return d.Label(
        id=m["id"],
        node_id=m["node_id"],
        value=d.LabelValue(m["value"]),
        scope=d.LabelScope(m["scope"]),
        note=m["note"],
        created_at=m["created_at"],
        retracted_at=m["retracted_at"],
    )


def to_evaluation(row: Row[Any]) -> d.EvaluationResult:
    m = row._mapping
    return d.EvaluationResult(
        id=m["id"],
        node_id=m["node_id"],
        name=m["name"],
        kind=d.EvaluationKind(m["kind"]),
        result=m["result"],
        passed=m["passed"],
        error=m["error"],
        duration=m["duration"],
        created_at=m["created_at"],
    )


def to_job(row: Row[Any]) -> d.Job:
    m = row._mapping
    return d.Job(
        id=m["id"],
        kind=d.JobKind(m["kind"]),
        name=m["name"],
        status=d.JobStatus(m["status"]),
        base_model=m["base_model"],
        config=m["config"] or {},
        progress=m["progress"],
        metrics=m["metrics"] or {},
        pid=m["pid"],
        error=m["error"],
        created_at=m["created_at"],
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        updated_at=m["updated_at"],
    )


def to_job_event(row: Row[Any]) -> d.JobEvent:
    m = row._mapping
    return d.JobEvent(
        id=m["id"],
        job_id=m["job_id"],
        kind=m["kind"],
        step=m["step"],
        message=m["message"],
        data=m["data"] or {},
        created_at=m["created_at"],
    )


def to_adapter(row: Row[Any]) -> d.Adapter:
    m = row._mapping
    return d.Adapter(
        id=m["id"],
        name=m["name"],
        base_model=m["base_model"],
        path=m["path"],
        job_id=m["job_id"],
        metrics=m["metrics"] or {},
        created_at=m["created_at"],
    )


def to_batch(row: Row[Any]) -> d.Batch:
    m = row._mapping
    return d.Batch(
        id=m["id"],
        name=m["name"],
        source=m["source"],
        source_hash=m["source_hash"],
        status=d.BatchStatus(m["status"]),
        config=m["config"] or {},
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        finished_at=m["finished_at"],
    )


def to_batch_task(row: Row[Any]) -> d.BatchTask:
    m = row._mapping
    return d.BatchTask(
        id=m["id"],
        batch_id=m["batch_id"],
        line=m["line"],
        spec=m["spec"] or {},
        status=d.BatchTaskStatus(m["status"]),
        session_id=m["session_id"],
        worker=m["worker"],
        runs=m["runs"],
        result=m["result"] or {},
        error=m["error"],
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        updated_at=m["updated_at"],
    )
