"""Narrow views of the store: each a `Protocol` for what one kind of consumer needs of
`TraceStore`, which has them all. A screen or command that takes one of these depends on
that part of the store alone (a test checks `TraceStore` satisfies each); a consumer
that needs two names both (`class BatchView(Batches, Trees, Protocol)`)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from storage import domain as d
from storage.bulk_reads import NodeOutline
from storage.checks import CheckCounts


class Sessions(Protocol):
    """The sessions: one, a page, or many by id."""

    def get_session(self, session_id: int) -> d.Session: ...

    def list_sessions(
        self, *, status: d.SessionStatus | str | None = None, limit: int = 100, offset: int = 0
    ) -> list[d.Session]: ...

    def sessions_by_id(self, session_ids: Iterable[int]) -> dict[int, d.Session]: ...


class Trees(Protocol):
    """A session's trace tree and the evaluations recorded on it, read."""

    def tree(self, session_id: int, *, with_tokens: bool = False) -> list[d.Node]: ...

    def path(self, node_id: int, *, with_tokens: bool = False) -> list[d.Node]: ...

    def count_nodes(self, session_id: int) -> int: ...

    def get_node(self, node_id: int) -> d.Node: ...

    def nodes_by_id(
        self, node_ids: Iterable[int], *, with_tokens: bool = False, chunk: int = 500
    ) -> dict[int, d.Node]: ...

    def evaluations_for(self, node_ids: Iterable[int]) -> list[d.EvaluationResult]: ...

    def session_evaluation_marks(self, session_id: int) -> dict[int, CheckCounts]: ...


class Labels(Protocol):
    """The operator's labels: given, taken back, and a session's in effect."""

    def add_label(
        self,
        node_id: int,
        value: d.LabelValue | str,
        *,
        scope: d.LabelScope | str = d.LabelScope.BLOCK,
        note: str | None = None,
        source: str | None = None,
    ) -> d.Label: ...

    def retract_label(self, label_id: int) -> d.Label: ...

    def session_labels(self, session_id: int) -> dict[int, d.Label]: ...


class Jobs(Protocol):
    """Training jobs and their events, read."""

    def get_job(self, job_id: int) -> d.Job: ...

    def list_jobs(
        self, *, status: d.JobStatus | str | None = None, limit: int = 100
    ) -> list[d.Job]: ...

    def job_events(
        self, job_id: int, *, after_id: int = 0, kind: str | None = None, limit: int | None = None
    ) -> list[d.JobEvent]: ...


class Adapters(Protocol):
    """The registered adapters."""

    def get_adapter(self, name: str) -> d.Adapter: ...

    def list_adapters(self) -> list[d.Adapter]: ...

    def register_adapter(
        self,
        name: str,
        *,
        base_model: str,
        path: str | Path,
        job_id: int | None = None,
        metrics: dict[str, Any] | None = None,
        replace_existing: bool = False,
    ) -> d.Adapter: ...


class Batches(Protocol):
    """Batches of sessions and their tasks."""

    def create_batch(
        self,
        specs: Sequence[dict[str, Any]],
        *,
        name: str,
        source: str,
        source_hash: str,
        config: dict[str, Any] | None = None,
    ) -> d.Batch: ...

    def get_batch(self, batch_id: int) -> d.Batch: ...

    def list_batches(
        self, *, source_hash: str | None = None, limit: int = 100
    ) -> list[d.Batch]: ...

    def batch_tasks(
        self, batch_id: int, statuses: Collection[d.BatchTaskStatus] | None = None
    ) -> list[d.BatchTask]: ...

    def batch_counts(self, batch_id: int) -> dict[d.BatchTaskStatus, int]: ...

    def claim_batch_task(self, batch_id: int, worker: str) -> d.BatchTask | None: ...

    def set_batch_task_session(self, task_id: int, session_id: int) -> None: ...

    def finish_batch_task(
        self,
        task_id: int,
        status: d.BatchTaskStatus | str,
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> d.BatchTask: ...

    def abort_running_batch_tasks(self, batch_id: int) -> int: ...

    def set_batch_status(self, batch_id: int, status: d.BatchStatus | str) -> d.Batch: ...


class Improvements(Protocol):
    """The runs of `agent-console improve`."""

    def create_improvement(
        self, family: str, *, config: dict[str, Any], state: dict[str, Any] | None = None
    ) -> d.Improvement: ...

    def get_improvement(self, improvement_id: int) -> d.Improvement: ...

    def list_improvements(self, *, limit: int = 100) -> list[d.Improvement]: ...

    def update_improvement(
        self, improvement_id: int, *, status: str | None = None, state: dict[str, Any] | None = None
    ) -> d.Improvement: ...


class JobWrites(Jobs, Protocol):
    """Training jobs: made, changed, and their events written (the worker, its reports)."""

    def create_job(
        self,
        kind: d.JobKind | str,
        name: str,
        *,
        base_model: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> d.Job: ...

    def update_job(self, job_id: int, **changes: Any) -> d.Job: ...

    def add_job_event(
        self,
        job_id: int,
        kind: str,
        *,
        message: str | None = None,
        step: int | None = None,
        data: dict[str, Any] | None = None,
    ) -> d.JobEvent: ...


class Review(Sessions, Trees, Labels, Protocol):
    """A session read and labelled (the similar-branches screen, labels from the checks)."""


class QueuePages(Protocol):
    """What a page of the label queue is read from: the queue, and each item's context
    (its session, decisions, tick, evaluations and automatic labels)."""

    def label_queue(
        self,
        *,
        limit: int = 200,
        after: tuple[int, int, int] | None = None,
        offset: int = 0,
        session_id: int | None = None,
        kind: str = "action",
    ) -> list[d.Node]: ...

    def count_label_queue(
        self,
        *,
        after: tuple[int, int, int] | None = None,
        session_id: int | None = None,
        kind: str = "action",
    ) -> int: ...

    def sessions_by_id(self, session_ids: Iterable[int]) -> dict[int, d.Session]: ...

    def decisions_for(self, node_ids: Iterable[int]) -> list[d.Decision]: ...

    def tick_nodes(
        self, session_id: int, ticks: Iterable[int], *, after_id: int = 0
    ) -> list[d.Node]: ...

    def evaluations_for(self, node_ids: Iterable[int]) -> list[d.EvaluationResult]: ...

    def automatic_labels(self, node_ids: Iterable[int]) -> dict[int, d.Label]: ...


class Evidence(Protocol):
    """What the training rules count a session's data from: its outline, labels and
    decisions, the sessions touched since a time, and the automatic labels in effect."""

    def session_ids(self, *, active_since: float | None = None) -> list[int]: ...

    def tree_outline(self, session_id: int) -> list[NodeOutline]: ...

    def session_labels(self, session_id: int) -> dict[int, d.Label]: ...

    def session_decisions(self, session_id: int) -> list[d.Decision]: ...

    def count_automatic_labels(self) -> int: ...


class Labelling(QueuePages, Evidence, Review, Protocol):
    """The label screen's store: the queue's pages, the rules' counts, and what the
    similar-branches screen reviews."""


class JobControl(JobWrites, Protocol):
    """What cancels, resumes and starts a job's worker: the job writes, the adapter it
    registers, and where the store is (the worker opens it by `url`)."""

    url: str
    where: str

    def get_adapter(self, name: str) -> d.Adapter: ...


#: Every view, for the test that `TraceStore` satisfies them.
VIEWS = (
    Sessions,
    Trees,
    Labels,
    Jobs,
    JobWrites,
    Adapters,
    Batches,
    Improvements,
    Review,
    QueuePages,
    Evidence,
    Labelling,
    JobControl,
)
