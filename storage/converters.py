"""Rows to domain records: the one place that knows both shapes."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, TypeVar, get_origin, get_type_hints

from sqlalchemy import Row

from storage import domain as d
from storage.models import (
    AdapterRow,
    BatchRow,
    BatchTaskRow,
    DecisionRow,
    EvaluationRow,
    ImprovementRow,
    JobEventRow,
    JobRow,
    LabelRow,
    NodeRow,
    SessionRow,
)

R = TypeVar("R")


def _or_empty(value: Any) -> Any:
    return value or {}


def _mapper(cls: type[R]) -> Callable[[Row[Any] | Mapping[str, Any]], R]:
    """A row (or a mapping of its columns) to `cls`, field by field, by column name: enums
    made from their values, JSON columns that hold NULL read as {}."""

    @functools.cache
    def steps() -> tuple[tuple[str, Callable[[Any], Any] | None], ...]:
        hints = get_type_hints(cls)
        plan: list[tuple[str, Callable[[Any], Any] | None]] = []
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            hint = hints[f.name]
            if isinstance(hint, type) and issubclass(hint, Enum):
                plan.append((f.name, hint))
            elif get_origin(hint) is dict:
                plan.append((f.name, _or_empty))
            else:
                plan.append((f.name, None))
        return tuple(plan)

    def convert(row: Row[Any] | Mapping[str, Any]) -> R:
        m = row._mapping if isinstance(row, Row) else row
        return cls(**{name: m[name] if to is None else to(m[name]) for name, to in steps()})

    return convert


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
IMPROVEMENT_COLUMNS = tuple(ImprovementRow.__table__.c)


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


to_session = _mapper(d.Session)
to_decision = _mapper(d.Decision)
to_label = _mapper(d.Label)
to_evaluation = _mapper(d.EvaluationResult)
to_job = _mapper(d.Job)
to_job_event = _mapper(d.JobEvent)
to_adapter = _mapper(d.Adapter)
to_batch = _mapper(d.Batch)
to_batch_task = _mapper(d.BatchTask)
to_improvement = _mapper(d.Improvement)
