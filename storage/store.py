"""`TraceStore`: the one API to the trace tree, decisions, labels, evaluations, jobs and
adapters.

Every write is one short transaction on the writer engine (`BEGIN IMMEDIATE` on SQLite);
every read a short connection on the reader engine. Nothing here holds a transaction
open between calls, so a long-lived console doesn't make the WAL grow, and iterators page
with keysets instead of holding a cursor.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Collection, Iterable, Iterator, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple, TypeVar, cast

from sqlalchemy import (
    Column,
    Connection,
    Row,
    Select,
    Table,
    and_,
    case,
    exists,
    func,
    insert,
    literal,
    or_,
    select,
    text,
    tuple_,
    union,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.dml import Insert, Update

from storage import converters as cv
from storage import domain as d
from storage.engine import create_engines, database_url, sqlite_path
from storage.errors import NotFoundError, StoreError
from storage.migrate import ensure_schema
from storage.models import (
    AdapterRow,
    BatchRow,
    BatchTaskRow,
    DecisionRow,
    EvaluationRow,
    JobEventRow,
    JobRow,
    LabelRow,
    Logprobs,
    MemoryVectorRow,
    NodeRow,
    SessionRow,
    TokenIds,
)

session_t = cast(Table, SessionRow.__table__)
node_t = cast(Table, NodeRow.__table__)
decision_t = cast(Table, DecisionRow.__table__)
label_t = cast(Table, LabelRow.__table__)
evaluation_t = cast(Table, EvaluationRow.__table__)
job_t = cast(Table, JobRow.__table__)
job_event_t = cast(Table, JobEventRow.__table__)
adapter_t = cast(Table, AdapterRow.__table__)
memory_t = cast(Table, MemoryVectorRow.__table__)
batch_t = cast(Table, BatchRow.__table__)
batch_task_t = cast(Table, BatchTaskRow.__table__)

E = TypeVar("E", bound=StrEnum)

_JOB_FIELDS = {"status", "progress", "metrics", "pid", "error", "config", "base_model", "name"}
_FINISHED = {d.JobStatus.COMPLETED, d.JobStatus.FAILED, d.JobStatus.CANCELLED}


def _enum(kind: type[E], value: str | E) -> E:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise ValueError(f"{value!r} is not a valid {kind.__name__} ({allowed})") from None


def _unpack(packed: array[Any] | None) -> list[Any] | None:
    return None if packed is None else packed.tolist()


class TraceStore:
    """Open (creating or upgrading) the store at `db`: a file path or a SQLAlchemy URL."""

    def __init__(self, db: str | Path) -> None:
        self.url = database_url(db)
        path = sqlite_path(self.url)
        self.where = str(path) if path is not None else self.url
        self._writer, self._reader = create_engines(self.url)
        try:
            ensure_schema(self._writer, where=self.where)
        except BaseException:
            self.close()
            raise

    def health(self) -> dict[str, str]:
        """What `agent-console doctor` reports: where the store is, its schema revision,
        and for SQLite the journal mode and `PRAGMA quick_check`."""
        from storage.migrate import current_revision

        with self._read() as conn:
            report = {"where": self.where, "schema": str(current_revision(conn))}
            if sqlite_path(self.url) is not None:
                report["journal_mode"] = str(conn.exec_driver_sql("PRAGMA journal_mode").scalar())
                report["integrity"] = str(conn.exec_driver_sql("PRAGMA quick_check").scalar())
        return report

    def close(self) -> None:
        self._writer.dispose()
        self._reader.dispose()

    def __enter__(self) -> TraceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self):  # -> context manager yielding a Connection in a write transaction
        return self._writer.begin()

    def _read(self):
        return self._reader.connect()

    # -- sessions ---------------------------------------------------------------------

    def create_session(
        self,
        task: str,
        *,
        title: str = "",
        backend: str | None = None,
        model: str | None = None,
        adapter: str | None = None,
        settings: dict[str, Any] | None = None,
        status: d.SessionStatus | str = d.SessionStatus.RUNNING,
    ) -> d.Session:
        now = time.time()
        values = {
            "title": title,
            "task": task,
            "backend": backend,
            "model": model,
            "adapter": adapter,
            "settings": settings or {},
            "status": _enum(d.SessionStatus, status).value,
            "created_at": now,
            "updated_at": now,
        }
        with self._write() as conn:
            row = conn.execute(insert(session_t).values(values).returning(*cv.SESSION_COLUMNS))
            return cv.to_session(row.one())

    def get_session(self, session_id: int) -> d.Session:
        with self._read() as conn:
            row = conn.execute(
                select(*cv.SESSION_COLUMNS).where(session_t.c.id == session_id)
            ).first()
        if row is None:
            raise NotFoundError(f"no session {session_id}")
        return cv.to_session(row)

    def list_sessions(
        self,
        *,
        status: d.SessionStatus | str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[d.Session]:
        """Most recently updated first."""
        stmt = select(*cv.SESSION_COLUMNS).order_by(
            session_t.c.updated_at.desc(), session_t.c.id.desc()
        )
        if status is not None:
            stmt = stmt.where(session_t.c.status == _enum(d.SessionStatus, status).value)
        with self._read() as conn:
            rows = conn.execute(stmt.limit(limit).offset(offset)).all()
        return [cv.to_session(r) for r in rows]

    def sessions_with_setting(self, key: str, field: str, value: str) -> list[d.Session]:
        """The sessions whose settings hold `value` at `settings[key][field]` (oldest first):
        how an import finds the session a trace was imported into before."""
        stmt = (
            select(*cv.SESSION_COLUMNS)
            .where(session_t.c.settings[key][field].as_string() == value)
            .order_by(session_t.c.id)
        )
        with self._read() as conn:
            return [cv.to_session(r) for r in conn.execute(stmt)]

    def set_session_status(
        self, session_id: int, status: d.SessionStatus | str, *, reason: str | None = None
    ) -> None:
        """Set the status; a `reason` (why it failed, was truncated, ...) is kept in the
        session's settings as `status_reason`, replacing the last one ("" removes it)."""
        value = _enum(d.SessionStatus, status).value
        changes: dict[str, Any] = {"status": value, "updated_at": time.time()}
        with self._write() as conn:
            if reason is not None:
                settings = conn.execute(
                    select(session_t.c.settings).where(session_t.c.id == session_id)
                ).scalar()
                changes["settings"] = d.with_status_reason(settings or {}, reason)
            done = conn.execute(
                update(session_t).where(session_t.c.id == session_id).values(**changes)
            )
            if done.rowcount == 0:
                raise NotFoundError(f"no session {session_id}")

    # -- batches ----------------------------------------------------------------------

    def create_batch(
        self,
        specs: Sequence[dict[str, Any]],
        *,
        name: str,
        source: str,
        source_hash: str,
        config: dict[str, Any] | None = None,
    ) -> d.Batch:
        """A batch and its tasks, one per spec (line numbers from 1), all pending."""
        now = time.time()
        with self._write() as conn:
            row = conn.execute(
                insert(batch_t)
                .values(
                    name=name,
                    source=source,
                    source_hash=source_hash,
                    status=d.BatchStatus.RUNNING.value,
                    config=config or {},
                    created_at=now,
                    updated_at=now,
                    finished_at=None,
                )
                .returning(*cv.BATCH_COLUMNS)
            ).one()
            if specs:
                conn.execute(
                    insert(batch_task_t),
                    [
                        {
                            "batch_id": row.id,
                            "line": number,
                            "spec": spec,
                            "status": d.BatchTaskStatus.PENDING.value,
                            "session_id": None,
                            "worker": None,
                            "runs": 0,
                            "result": {},
                            "error": None,
                            "started_at": None,
                            "finished_at": None,
                            "updated_at": now,
                        }
                        for number, spec in enumerate(specs, 1)
                    ],
                )
            return cv.to_batch(row)

    def get_batch(self, batch_id: int) -> d.Batch:
        with self._read() as conn:
            row = conn.execute(select(*cv.BATCH_COLUMNS).where(batch_t.c.id == batch_id)).first()
        if row is None:
            raise NotFoundError(f"no batch {batch_id}")
        return cv.to_batch(row)

    def list_batches(self, *, source_hash: str | None = None, limit: int = 100) -> list[d.Batch]:
        """Newest first; `source_hash` keeps the batches of one tasks file."""
        stmt = select(*cv.BATCH_COLUMNS).order_by(batch_t.c.id.desc()).limit(limit)
        if source_hash is not None:
            stmt = stmt.where(batch_t.c.source_hash == source_hash)
        with self._read() as conn:
            return [cv.to_batch(r) for r in conn.execute(stmt)]

    def set_batch_status(self, batch_id: int, status: d.BatchStatus | str) -> d.Batch:
        value = _enum(d.BatchStatus, status)
        now = time.time()
        finished = None if value is d.BatchStatus.RUNNING else now
        with self._write() as conn:
            row = conn.execute(
                update(batch_t)
                .where(batch_t.c.id == batch_id)
                .values(status=value.value, updated_at=now, finished_at=finished)
                .returning(*cv.BATCH_COLUMNS)
            ).first()
        if row is None:
            raise NotFoundError(f"no batch {batch_id}")
        return cv.to_batch(row)

    def batch_tasks(
        self, batch_id: int, statuses: Collection[d.BatchTaskStatus] | None = None
    ) -> list[d.BatchTask]:
        """A batch's tasks in line order."""
        stmt = (
            select(*cv.BATCH_TASK_COLUMNS)
            .where(batch_task_t.c.batch_id == batch_id)
            .order_by(batch_task_t.c.line)
        )
        if statuses is not None:
            stmt = stmt.where(batch_task_t.c.status.in_([s.value for s in statuses]))
        with self._read() as conn:
            return [cv.to_batch_task(r) for r in conn.execute(stmt)]

    def batch_counts(self, batch_id: int) -> dict[d.BatchTaskStatus, int]:
        """How many of a batch's tasks are in each status (every status, 0 included)."""
        stmt = (
            select(batch_task_t.c.status, func.count())
            .where(batch_task_t.c.batch_id == batch_id)
            .group_by(batch_task_t.c.status)
        )
        counts = dict.fromkeys(d.BatchTaskStatus, 0)
        with self._read() as conn:
            for status, count in conn.execute(stmt):
                counts[d.BatchTaskStatus(status)] = count
        return counts

    def claim_batch_task(self, batch_id: int, worker: str) -> d.BatchTask | None:
        """Take up the batch's first open task (pending, or aborted: resumed) for `worker`,
        or None when none is left. Atomic: two workers never get the same task (SQLite
        writes one at a time; PostgreSQL skips rows another worker has locked)."""
        open_ = [s.value for s in d.BATCH_TASK_OPEN]
        now = time.time()
        with self._write() as conn:
            pick = (
                select(batch_task_t.c.id)
                .where(batch_task_t.c.batch_id == batch_id, batch_task_t.c.status.in_(open_))
                .order_by(batch_task_t.c.line)
                .limit(1)
            )
            if conn.dialect.name == "postgresql":
                pick = pick.with_for_update(skip_locked=True)
            task_id = conn.execute(pick).scalar()
            if task_id is None:
                return None
            row = conn.execute(
                update(batch_task_t)
                .where(batch_task_t.c.id == task_id)
                .values(
                    status=d.BatchTaskStatus.RUNNING.value,
                    worker=worker,
                    runs=batch_task_t.c.runs + 1,
                    started_at=now,
                    updated_at=now,
                )
                .returning(*cv.BATCH_TASK_COLUMNS)
            ).one()
            return cv.to_batch_task(row)

    def set_batch_task_session(self, task_id: int, session_id: int) -> None:
        with self._write() as conn:
            conn.execute(
                update(batch_task_t)
                .where(batch_task_t.c.id == task_id)
                .values(session_id=session_id, updated_at=time.time())
            )

    def finish_batch_task(
        self,
        task_id: int,
        status: d.BatchTaskStatus | str,
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> d.BatchTask:
        value = _enum(d.BatchTaskStatus, status)
        now = time.time()
        with self._write() as conn:
            row = conn.execute(
                update(batch_task_t)
                .where(batch_task_t.c.id == task_id)
                .values(
                    status=value.value,
                    result=result or {},
                    error=error,
                    finished_at=None if value in d.BATCH_TASK_OPEN else now,
                    updated_at=now,
                )
                .returning(*cv.BATCH_TASK_COLUMNS)
            ).first()
        if row is None:
            raise NotFoundError(f"no batch task {task_id}")
        return cv.to_batch_task(row)

    def abort_running_batch_tasks(self, batch_id: int) -> int:
        """Mark the tasks still running as aborted (after a stop, or at resume when the
        run before was killed): a resumed batch continues their sessions."""
        with self._write() as conn:
            done = conn.execute(
                update(batch_task_t)
                .where(
                    batch_task_t.c.batch_id == batch_id,
                    batch_task_t.c.status == d.BatchTaskStatus.RUNNING.value,
                )
                .values(status=d.BatchTaskStatus.ABORTED.value, updated_at=time.time())
            )
            return done.rowcount

    # -- nodes ------------------------------------------------------------------------

    def add_node(self, session_id: int, node: d.NewNode) -> d.Node:
        return self.add_nodes(session_id, [node])[0]

    def add_nodes(self, session_id: int, nodes: Sequence[d.NewNode]) -> list[d.Node]:
        """Insert a batch in one transaction and one multi-row INSERT; ids come back in
        the batch's order.

        Entries may hang under stored nodes (`parent_id`) or under earlier entries of the
        same batch (`parent_index`), so a whole subtree goes in one call: the ids are
        reserved first, which lets each row name its parent before anything is written.
        """
        if not nodes:
            return []
        self._check_batch(nodes)
        now = time.time()
        rows = [self._node_values(session_id, n, now) for n in nodes]
        with self._write() as conn:
            self._check_targets(conn, session_id, nodes)
            ids = self._reserve_node_ids(conn, len(rows))
            for row, node, new_id in zip(rows, nodes, ids, strict=True):
                row["id"] = new_id
                if node.parent_index is not None:
                    row["parent_id"] = ids[node.parent_index]
            conn.execute(insert(node_t), rows)
            conn.execute(
                update(session_t).where(session_t.c.id == session_id).values(updated_at=now)
            )
        return [
            cv.node_from_values(row, _unpack(row["token_ids"]), _unpack(row["logprobs"]))
            for row in rows
        ]

    @staticmethod
    def _reserve_node_ids(conn: Connection, count: int) -> list[int]:
        if conn.dialect.name == "postgresql":
            return list(
                conn.execute(
                    text(
                        "SELECT nextval(pg_get_serial_sequence('node', 'id')) "
                        "FROM generate_series(1, :n)"
                    ),
                    {"n": count},
                ).scalars()
            )
        # SQLite: BEGIN IMMEDIATE holds the write lock, so nobody else takes these ids.
        top = conn.execute(select(func.max(node_t.c.id))).scalar() or 0
        return list(range(top + 1, top + 1 + count))

    @staticmethod
    def _check_batch(nodes: Sequence[d.NewNode]) -> None:
        for i, n in enumerate(nodes):
            if n.parent_index is None:
                continue
            if n.parent_id is not None:
                raise ValueError(f"batch entry {i} names both parent_id and parent_index")
            if not 0 <= n.parent_index < i:
                raise ValueError(
                    f"batch entry {i} has parent_index {n.parent_index}: "
                    "it must name an earlier entry of the same batch"
                )

    def _check_targets(self, conn: Connection, session_id: int, nodes: Sequence[d.NewNode]) -> None:
        """The session exists and every node the batch names is one of its nodes (a node
        found in the session proves the session, so that takes one query)."""
        referenced = {n.parent_id for n in nodes} | {n.edited_from_id for n in nodes}
        referenced.discard(None)
        if not referenced:
            session = select(session_t.c.id).where(session_t.c.id == session_id)
            if conn.execute(session).first() is None:
                raise NotFoundError(f"no session {session_id}")
            return
        found = dict(
            conn.execute(
                select(node_t.c.id, node_t.c.session_id).where(node_t.c.id.in_(referenced))
            ).all()
        )
        for node_id in sorted(referenced):  # type: ignore[type-var]
            if node_id not in found:
                raise NotFoundError(f"no node {node_id}")
            if found[node_id] != session_id:
                raise ValueError(
                    f"node {node_id} belongs to session {found[node_id]}, not {session_id}"
                )

    @staticmethod
    def _node_values(session_id: int, n: d.NewNode, now: float) -> dict[str, Any]:
        if not n.kind:
            raise ValueError("a node needs a kind")
        return {
            "session_id": session_id,
            "parent_id": n.parent_id,
            "tick": n.tick,
            "kind": n.kind,
            "text": n.text,
            "author": _enum(d.Author, n.author).value,
            "status": _enum(d.NodeStatus, n.status).value,
            "score": n.score,
            "score_parts": dict(n.score_parts),
            "token_ids": TokenIds.pack(n.token_ids),
            "logprobs": Logprobs.pack(n.logprobs),
            "sampling": dict(n.sampling),
            "edited_from_id": n.edited_from_id,
            "truncated": n.truncated,
            "prompt_hash": n.prompt_hash,
            "meta": dict(n.meta),
            "created_at": now,
            "updated_at": now,
        }

    def get_node(self, node_id: int) -> d.Node:
        with self._read() as conn:
            row = conn.execute(select(*cv.NODE_COLUMNS).where(node_t.c.id == node_id)).first()
        if row is None:
            raise NotFoundError(f"no node {node_id}")
        return cv.to_node(row, with_tokens=True)

    def children(self, node_id: int, *, with_tokens: bool = False) -> list[d.Node]:
        columns = cv.NODE_COLUMNS if with_tokens else cv.NODE_LIGHT_COLUMNS
        with self._read() as conn:
            rows = conn.execute(
                select(*columns).where(node_t.c.parent_id == node_id).order_by(node_t.c.id)
            ).all()
        return [cv.to_node(r, with_tokens) for r in rows]

    def path(self, node_id: int, *, with_tokens: bool = False) -> list[d.Node]:
        """The nodes from the root down to `node_id`, inclusive, in one recursive query."""
        up = (
            select(node_t.c.id, node_t.c.parent_id, literal(0).label("depth"))
            .where(node_t.c.id == node_id)
            .cte("up", recursive=True)
        )
        up = up.union_all(
            select(node_t.c.id, node_t.c.parent_id, (up.c.depth + 1).label("depth")).where(
                node_t.c.id == up.c.parent_id
            )
        )
        columns = cv.NODE_COLUMNS if with_tokens else cv.NODE_LIGHT_COLUMNS
        stmt = select(*columns).join(up, up.c.id == node_t.c.id).order_by(up.c.depth.desc())
        with self._read() as conn:
            rows = conn.execute(stmt).all()
        if not rows:
            raise NotFoundError(f"no node {node_id}")
        return [cv.to_node(r, with_tokens) for r in rows]

    def tree(self, session_id: int, *, with_tokens: bool = False) -> list[d.Node]:
        """Every node of a session in one query, parents before children (id order)."""
        columns = cv.NODE_COLUMNS if with_tokens else cv.NODE_LIGHT_COLUMNS
        with self._read() as conn:
            rows = conn.execute(
                select(*columns).where(node_t.c.session_id == session_id).order_by(node_t.c.id)
            ).all()
        return [cv.to_node(r, with_tokens) for r in rows]

    def count_nodes(self, session_id: int) -> int:
        with self._read() as conn:
            return conn.execute(
                select(func.count()).select_from(node_t).where(node_t.c.session_id == session_id)
            ).scalar_one()

    def set_node_status(self, node_id: int, status: d.NodeStatus | str) -> None:
        value = _enum(d.NodeStatus, status).value
        with self._write() as conn:
            done = conn.execute(
                update(node_t)
                .where(node_t.c.id == node_id)
                .values(status=value, updated_at=time.time())
            )
            if done.rowcount == 0:
                raise NotFoundError(f"no node {node_id}")

    def update_node(
        self,
        node_id: int,
        *,
        status: d.NodeStatus | str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> d.Node:
        """Change a node's status and merge keys into its metadata (the text, score and
        tokens of a node never change: an edit is a new node)."""
        values: dict[str, Any] = {"updated_at": time.time()}
        if status is not None:
            values["status"] = _enum(d.NodeStatus, status).value
        with self._write() as conn:
            if meta:
                row = conn.execute(select(node_t.c.meta).where(node_t.c.id == node_id)).first()
                if row is None:
                    raise NotFoundError(f"no node {node_id}")
                values["meta"] = {**(row[0] or {}), **meta}
            updated = conn.execute(
                update(node_t)
                .where(node_t.c.id == node_id)
                .values(values)
                .returning(*cv.NODE_COLUMNS)
            ).first()
            if updated is None:
                raise NotFoundError(f"no node {node_id}")
        return cv.to_node(updated, with_tokens=True)

    # -- decisions, labels, evaluations -----------------------------------------------

    def record_decision(
        self,
        node_id: int,
        verdict: d.Verdict | str,
        *,
        actor: d.Actor | str = d.Actor.OPERATOR,
        reason: str | None = None,
        result_node_id: int | None = None,
    ) -> d.Decision:
        """Store one approval-gate verdict. `result_node_id` is the operator's edit (for
        `edit`) or the alternate taken instead (for `pick_alternate`)."""
        values = {
            "node_id": node_id,
            "verdict": _enum(d.Verdict, verdict).value,
            "actor": _enum(d.Actor, actor).value,
            "reason": reason,
            "result_node_id": result_node_id,
            "created_at": time.time(),
        }
        with self._write() as conn:
            self._require_nodes(conn, {node_id, result_node_id})
            row = conn.execute(insert(decision_t).values(values).returning(*cv.DECISION_COLUMNS))
            return cv.to_decision(row.one())

    def decisions(self, node_id: int) -> list[d.Decision]:
        with self._read() as conn:
            rows = conn.execute(
                select(*cv.DECISION_COLUMNS)
                .where(decision_t.c.node_id == node_id)
                .order_by(decision_t.c.id)
            ).all()
        return [cv.to_decision(r) for r in rows]

    def add_label(
        self,
        node_id: int,
        value: d.LabelValue | str,
        *,
        scope: d.LabelScope | str = d.LabelScope.BLOCK,
        note: str | None = None,
    ) -> d.Label:
        """Label a block (or the whole path to it). Earlier labels stay as history; the
        latest one that is not retracted is the node's label."""
        values = {
            "node_id": node_id,
            "value": _enum(d.LabelValue, value).value,
            "scope": _enum(d.LabelScope, scope).value,
            "note": note,
            "created_at": time.time(),
            "retracted_at": None,
        }
        with self._write() as conn:
            self._require_nodes(conn, {node_id})
            row = conn.execute(insert(label_t).values(values).returning(*cv.LABEL_COLUMNS))
            return cv.to_label(row.one())

    def retract_label(self, label_id: int) -> d.Label:
        """Undo a label: it stays in the history, marked retracted; the node falls back
        to its previous label, if any."""
        with self._write() as conn:
            row = conn.execute(
                update(label_t)
                .where(label_t.c.id == label_id, label_t.c.retracted_at.is_(None))
                .values(retracted_at=time.time())
                .returning(*cv.LABEL_COLUMNS)
            ).first()
            if row is None:
                exists_ = conn.execute(select(label_t.c.id).where(label_t.c.id == label_id)).first()
                raise (
                    StoreError(f"label {label_id} is already retracted")
                    if exists_
                    else NotFoundError(f"no label {label_id}")
                )
            return cv.to_label(row)

    def label_of(self, node_id: int) -> d.Label | None:
        with self._read() as conn:
            row = conn.execute(
                select(*cv.LABEL_COLUMNS)
                .where(label_t.c.node_id == node_id, label_t.c.retracted_at.is_(None))
                .order_by(label_t.c.id.desc())
                .limit(1)
            ).first()
        return cv.to_label(row) if row else None

    def label_history(self, node_id: int) -> list[d.Label]:
        with self._read() as conn:
            rows = conn.execute(
                select(*cv.LABEL_COLUMNS).where(label_t.c.node_id == node_id).order_by(label_t.c.id)
            ).all()
        return [cv.to_label(r) for r in rows]

    def session_labels(self, session_id: int) -> dict[int, d.Label]:
        """The effective label of every labelled node in a session (for tree marks)."""
        stmt = (
            select(*cv.LABEL_COLUMNS)
            .join(node_t, node_t.c.id == label_t.c.node_id)
            .where(node_t.c.session_id == session_id, label_t.c.retracted_at.is_(None))
            .order_by(label_t.c.id)
        )
        with self._read() as conn:
            return {lab.node_id: lab for lab in map(cv.to_label, conn.execute(stmt))}

    def record_evaluation(
        self,
        node_id: int,
        name: str,
        *,
        kind: d.EvaluationKind | str = d.EvaluationKind.CALLBACK,
        result: Any = None,
        passed: bool | None = None,
        error: str | None = None,
        duration: float | None = None,
    ) -> d.EvaluationResult:
        values = {
            "node_id": node_id,
            "name": name,
            "kind": _enum(d.EvaluationKind, kind).value,
            "result": result,
            "passed": passed,
            "error": error,
            "duration": duration,
            "created_at": time.time(),
        }
        with self._write() as conn:
            self._require_nodes(conn, {node_id})
            row = conn.execute(
                insert(evaluation_t).values(values).returning(*cv.EVALUATION_COLUMNS)
            )
            return cv.to_evaluation(row.one())

    def evaluations(self, node_id: int) -> list[d.EvaluationResult]:
        with self._read() as conn:
            rows = conn.execute(
                select(*cv.EVALUATION_COLUMNS)
                .where(evaluation_t.c.node_id == node_id)
                .order_by(evaluation_t.c.id)
            ).all()
        return [cv.to_evaluation(r) for r in rows]

    def _require_nodes(self, conn: Connection, node_ids: Iterable[int | None]) -> None:
        wanted = {i for i in node_ids if i is not None}
        found = set(conn.execute(select(node_t.c.id).where(node_t.c.id.in_(wanted))).scalars())
        for missing in sorted(wanted - found):
            raise NotFoundError(f"no node {missing}")

    # -- training data ----------------------------------------------------------------

    def iter_labelled(
        self, *, since: float | None = None, page_size: int = 500, with_tokens: bool = False
    ) -> Iterator[d.LabelledNode]:
        """Every node whose latest unretracted label was given at or after `since`, with
        that label, in node order. Pages by node id, one short read per page, so memory
        stays flat however large the store."""
        effective = _latest_label()
        columns = cv.NODE_COLUMNS if with_tokens else cv.NODE_LIGHT_COLUMNS
        stmt = (
            select(*columns, *cv.LABEL_COLUMNS)
            .join(node_t, node_t.c.id == label_t.c.node_id)
            .where(effective)
            .order_by(label_t.c.node_id)
        )
        if since is not None:
            stmt = stmt.where(label_t.c.created_at >= since)
        for row in self._paged(stmt, label_t.c.node_id, page_size):
            label = cv.to_label(cv.joined(row, cv.LABEL_COLUMNS))
            yield d.LabelledNode(node=cv.to_node(row, with_tokens), label=label)

    def iter_decisions(
        self, *, since: float | None = None, page_size: int = 500, with_tokens: bool = False
    ) -> Iterator[d.DecidedNode]:
        """Every approval-gate decision with the node it judged, oldest first, paged."""
        columns = cv.NODE_COLUMNS if with_tokens else cv.NODE_LIGHT_COLUMNS
        stmt = (
            select(*columns, *cv.DECISION_COLUMNS)
            .join(node_t, node_t.c.id == decision_t.c.node_id)
            .order_by(decision_t.c.id)
        )
        if since is not None:
            stmt = stmt.where(decision_t.c.created_at >= since)
        for row in self._paged(stmt, decision_t.c.id, page_size):
            decision = cv.to_decision(cv.joined(row, cv.DECISION_COLUMNS))
            yield d.DecidedNode(node=cv.to_node(row, with_tokens), decision=decision)

    def _paged(self, stmt: Select[Any], key: Column[int], page_size: int) -> Iterator[Row[Any]]:
        """Rows of `stmt` (ordered by `key`, which must be unique per row) one page per
        short read: keyset paging, so no cursor or transaction stays open between pages."""
        key_at = next(i for i, c in enumerate(stmt.selected_columns) if c is key)
        last = 0
        while True:
            with self._read() as conn:
                rows = conn.execute(stmt.where(key > last).limit(page_size)).all()
            yield from rows
            if len(rows) < page_size:
                return
            last = rows[-1][key_at]

    # -- jobs and adapters ------------------------------------------------------------

    def create_job(
        self,
        kind: d.JobKind | str,
        name: str,
        *,
        base_model: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> d.Job:
        now = time.time()
        values = {
            "kind": _enum(d.JobKind, kind).value,
            "name": name,
            "status": d.JobStatus.QUEUED.value,
            "base_model": base_model,
            "config": config or {},
            "progress": 0.0,
            "metrics": {},
            "created_at": now,
            "updated_at": now,
        }
        with self._write() as conn:
            row = conn.execute(insert(job_t).values(values).returning(*cv.JOB_COLUMNS))
            return cv.to_job(row.one())

    def get_job(self, job_id: int) -> d.Job:
        with self._read() as conn:
            row = conn.execute(select(*cv.JOB_COLUMNS).where(job_t.c.id == job_id)).first()
        if row is None:
            raise NotFoundError(f"no job {job_id}")
        return cv.to_job(row)

    def list_jobs(
        self, *, status: d.JobStatus | str | None = None, limit: int = 100
    ) -> list[d.Job]:
        stmt = select(*cv.JOB_COLUMNS).order_by(job_t.c.id.desc()).limit(limit)
        if status is not None:
            stmt = stmt.where(job_t.c.status == _enum(d.JobStatus, status).value)
        with self._read() as conn:
            return [cv.to_job(r) for r in conn.execute(stmt)]

    def update_job(self, job_id: int, **changes: Any) -> d.Job:
        """Change a job's status, progress, metrics, pid, error, config, base model or
        name. Entering `running` stamps `started_at`; a final status stamps `finished_at`."""
        unknown = set(changes) - _JOB_FIELDS
        if unknown:
            raise ValueError(f"update_job cannot set {', '.join(sorted(unknown))}")
        now = time.time()
        values = dict(changes, updated_at=now)
        if "status" in changes:
            status = _enum(d.JobStatus, changes["status"])
            values["status"] = status.value
            if status is d.JobStatus.RUNNING:
                values["started_at"] = func.coalesce(job_t.c.started_at, now)
                values["finished_at"] = None
            elif status in _FINISHED:
                values["finished_at"] = now
        with self._write() as conn:
            row = conn.execute(
                update(job_t).where(job_t.c.id == job_id).values(values).returning(*cv.JOB_COLUMNS)
            ).first()
        if row is None:
            raise NotFoundError(f"no job {job_id}")
        return cv.to_job(row)

    def add_job_event(
        self,
        job_id: int,
        kind: str,
        *,
        message: str | None = None,
        step: int | None = None,
        data: dict[str, Any] | None = None,
    ) -> d.JobEvent:
        values = {
            "job_id": job_id,
            "kind": kind,
            "message": message,
            "step": step,
            "data": data or {},
            "created_at": time.time(),
        }
        with self._write() as conn:
            if conn.execute(select(job_t.c.id).where(job_t.c.id == job_id)).first() is None:
                raise NotFoundError(f"no job {job_id}")
            row = conn.execute(insert(job_event_t).values(values).returning(*cv.JOB_EVENT_COLUMNS))
            return cv.to_job_event(row.one())

    def job_events(
        self, job_id: int, *, after_id: int = 0, kind: str | None = None, limit: int | None = None
    ) -> list[d.JobEvent]:
        """Events after `after_id`, oldest first: poll with the last id seen to follow."""
        stmt = (
            select(*cv.JOB_EVENT_COLUMNS)
            .where(job_event_t.c.job_id == job_id, job_event_t.c.id > after_id)
            .order_by(job_event_t.c.id)
        )
        if kind is not None:
            stmt = stmt.where(job_event_t.c.kind == kind)
        if limit is not None:
            stmt = stmt.limit(limit)
        with self._read() as conn:
            return [cv.to_job_event(r) for r in conn.execute(stmt)]

    def register_adapter(
        self,
        name: str,
        *,
        base_model: str,
        path: str | Path,
        job_id: int | None = None,
        metrics: dict[str, Any] | None = None,
        replace_existing: bool = False,
    ) -> d.Adapter:
        """Record a finished adapter. The caller writes the files first (atomically), so
        the registry never points at a partial file."""
        values = {
            "name": name,
            "base_model": base_model,
            "path": str(path),
            "job_id": job_id,
            "metrics": metrics or {},
            "created_at": time.time(),
        }
        with self._write() as conn:
            existing = conn.execute(select(adapter_t.c.id).where(adapter_t.c.name == name)).first()
            if existing is not None:
                if not replace_existing:
                    raise StoreError(f"an adapter named {name!r} already exists")
                stmt: Update | Insert = (
                    update(adapter_t).where(adapter_t.c.id == existing[0]).values(values)
                )
            else:
                stmt = insert(adapter_t).values(values)
            try:
                row = conn.execute(stmt.returning(*cv.ADAPTER_COLUMNS)).one()
            except IntegrityError:
                raise NotFoundError(f"no job {job_id}") from None
            return cv.to_adapter(row)

    def get_adapter(self, name: str) -> d.Adapter:
        with self._read() as conn:
            row = conn.execute(select(*cv.ADAPTER_COLUMNS).where(adapter_t.c.name == name)).first()
        if row is None:
            raise NotFoundError(f"no adapter named {name!r}")
        return cv.to_adapter(row)

    def list_adapters(self) -> list[d.Adapter]:
        with self._read() as conn:
            rows = conn.execute(select(*cv.ADAPTER_COLUMNS).order_by(adapter_t.c.id.desc())).all()
        return [cv.to_adapter(r) for r in rows]

    # -- labelling: the queue of unlabelled branches; bulk reads a session or a page at a time

    def label_queue(
        self,
        *,
        limit: int = 200,
        after: tuple[int, int, int] | None = None,
        offset: int = 0,
        session_id: int | None = None,
        kind: str = "action",
    ) -> list[d.Node]:
        """Blocks of `kind` (of any status, alternates too) that no effective label covers
        (their own, or a path label on them or on a descendant): newest session first,
        then latest tick, then newest node. `after` is the (session id, tick, node id) of
        the last one seen, so the next page starts past it even while labels are given."""
        stmt = (
            select(*cv.NODE_LIGHT_COLUMNS)
            .where(*self._unlabelled(kind, session_id, after))
            .order_by(node_t.c.session_id.desc(), node_t.c.tick.desc(), node_t.c.id.desc())
            .limit(limit)
            .offset(offset)
        )
        with self._read() as conn:
            return [cv.to_node(r) for r in conn.execute(stmt)]

    def count_label_queue(
        self,
        *,
        after: tuple[int, int, int] | None = None,
        session_id: int | None = None,
        kind: str = "action",
    ) -> int:
        """How many `label_queue` items lie past `after` (all of them without it)."""
        stmt = (
            select(func.count())
            .select_from(node_t)
            .where(*self._unlabelled(kind, session_id, after))
        )
        with self._read() as conn:
            return int(conn.execute(stmt).scalar_one())

    @staticmethod
    def _unlabelled(
        kind: str, session_id: int | None, after: tuple[int, int, int] | None
    ) -> list[Any]:
        latest = (
            select(label_t.c.node_id, label_t.c.scope)
            .join(node_t, node_t.c.id == label_t.c.node_id)
            .where(_latest_label())
        )
        if session_id is not None:
            latest = latest.where(node_t.c.session_id == session_id)
        effective = latest.cte("effective")
        # A path label covers its node and every ancestor: walk up once (UNION drops the
        # nodes already reached, so overlapping paths cost no more than one).
        up = node_t.alias("up")
        covered = (
            select(effective.c.node_id.label("id"))
            .where(effective.c.scope == d.LabelScope.PATH.value)
            .cte("covered", recursive=True)
        )
        covered = covered.union(
            select(up.c.parent_id).where(up.c.id == covered.c.id, up.c.parent_id.is_not(None))
        )
        conditions: list[Any] = [
            node_t.c.kind == kind,
            node_t.c.id.not_in(select(effective.c.node_id)),
            node_t.c.id.not_in(select(covered.c.id)),
        ]
        if session_id is not None:
            conditions.append(node_t.c.session_id == session_id)
        if after is not None:
            conditions.append(tuple_(node_t.c.session_id, node_t.c.tick, node_t.c.id) < after)
        return conditions

    def session_ids(self, *, active_since: float | None = None) -> list[int]:
        """Every session's id, oldest first: enough to walk the store a session at a
        time. With `active_since`, only sessions where something happened at or after it
        (a block added or changed, a label given or retracted, a decision made)."""
        stmt = select(session_t.c.id).order_by(session_t.c.id)
        if active_since is not None:
            since = active_since
            touched = union(
                select(node_t.c.session_id).where(node_t.c.updated_at >= since),
                select(node_t.c.session_id)
                .join(label_t, label_t.c.node_id == node_t.c.id)
                .where(or_(label_t.c.created_at >= since, label_t.c.retracted_at >= since)),
                select(node_t.c.session_id)
                .join(decision_t, decision_t.c.node_id == node_t.c.id)
                .where(decision_t.c.created_at >= since),
            )
            stmt = stmt.where(session_t.c.id.in_(touched))
        with self._read() as conn:
            return list(conn.execute(stmt).scalars())

    def sessions_by_id(self, session_ids: Iterable[int]) -> dict[int, d.Session]:
        """The named sessions (those that exist) in one query."""
        wanted = sorted(set(session_ids))
        if not wanted:
            return {}
        with self._read() as conn:
            rows = conn.execute(select(*cv.SESSION_COLUMNS).where(session_t.c.id.in_(wanted))).all()
        return {s.id: s for s in map(cv.to_session, rows)}

    def nodes_by_id(
        self, node_ids: Iterable[int], *, with_tokens: bool = False, chunk: int = 500
    ) -> dict[int, d.Node]:
        """The named nodes (those that exist), a few hundred ids per query: a dataset
        builder's working set, without the rest of a large session."""
        wanted = sorted(set(node_ids))
        columns = cv.NODE_COLUMNS if with_tokens else cv.NODE_LIGHT_COLUMNS
        found: dict[int, d.Node] = {}
        with self._read() as conn:
            for start in range(0, len(wanted), chunk):
                ids = wanted[start : start + chunk]
                for row in conn.execute(select(*columns).where(node_t.c.id.in_(ids))):
                    node = cv.to_node(row, with_tokens)
                    found[node.id] = node
        return found

    def session_decisions(self, session_id: int) -> list[d.Decision]:
        """Every decision on a session's blocks, oldest first, in one query."""
        stmt = (
            select(*cv.DECISION_COLUMNS)
            .join(node_t, node_t.c.id == decision_t.c.node_id)
            .where(node_t.c.session_id == session_id)
            .order_by(decision_t.c.id)
        )
        with self._read() as conn:
            return [cv.to_decision(r) for r in conn.execute(stmt)]

    def decisions_for(self, node_ids: Iterable[int]) -> list[d.Decision]:
        """The decisions on any of `node_ids` (a page's worth), oldest first."""
        wanted = sorted(set(node_ids))
        if not wanted:
            return []
        stmt = (
            select(*cv.DECISION_COLUMNS)
            .where(decision_t.c.node_id.in_(wanted))
            .order_by(decision_t.c.id)
        )
        with self._read() as conn:
            return [cv.to_decision(r) for r in conn.execute(stmt)]

    def evaluations_for(self, node_ids: Iterable[int]) -> list[d.EvaluationResult]:
        """The evaluation results recorded on any of `node_ids` (a page's worth)."""
        wanted = sorted(set(node_ids))
        if not wanted:
            return []
        stmt = (
            select(*cv.EVALUATION_COLUMNS)
            .where(evaluation_t.c.node_id.in_(wanted))
            .order_by(evaluation_t.c.id)
        )
        with self._read() as conn:
            return [cv.to_evaluation(r) for r in conn.execute(stmt)]

    def tick_nodes(
        self, session_id: int, ticks: Iterable[int], *, after_id: int = 0
    ) -> list[d.Node]:
        """The blocks of some ticks of a session, in id order. `after_id` skips what is
        older (a block's descendants always have larger ids), so a long session is not
        scanned from its start for its last ticks."""
        wanted = sorted(set(ticks))
        if not wanted:
            return []
        stmt = (
            select(*cv.NODE_LIGHT_COLUMNS)
            .where(
                node_t.c.session_id == session_id,
                node_t.c.id > after_id,
                node_t.c.tick.in_(wanted),
            )
            .order_by(node_t.c.id)
        )
        with self._read() as conn:
            return [cv.to_node(r) for r in conn.execute(stmt)]

    def session_evaluation_marks(self, session_id: int) -> dict[int, bool]:
        """Per block of a session that has evaluation callbacks: whether any of them
        failed or raised (True) or all passed (False). One query, for the tree's marks."""
        failed = func.max(
            case(
                (or_(evaluation_t.c.passed.is_(False), evaluation_t.c.error.is_not(None)), 1),
                else_=0,
            )
        )
        stmt = (
            select(evaluation_t.c.node_id, failed)
            .join(node_t, node_t.c.id == evaluation_t.c.node_id)
            .where(
                node_t.c.session_id == session_id,
                evaluation_t.c.kind == d.EvaluationKind.CALLBACK.value,
            )
            .group_by(evaluation_t.c.node_id)
        )
        with self._read() as conn:
            return {node_id: bool(bad) for node_id, bad in conn.execute(stmt)}

    def tree_outline(self, session_id: int) -> list[NodeOutline]:
        """Every node of a session as its place in the tree and its verdict fields, in id
        order: no text, scores or metadata (their JSON decoding is most of a `tree` load),
        so the training rules can recount a large session after every label."""
        columns = [getattr(node_t.c, name) for name in NodeOutline._fields]
        stmt = select(*columns).where(node_t.c.session_id == session_id).order_by(node_t.c.id)
        authors = {a.value: a for a in d.Author}
        statuses = {s.value: s for s in d.NodeStatus}
        with self._read() as conn:
            return [
                NodeOutline(
                    i, sid, parent, tick, kind, authors[a], statuses[st], orig, made, changed
                )
                for i, sid, parent, tick, kind, a, st, orig, made, changed in conn.execute(stmt)
            ]

    # -- retrieval memory: which node each vector of an embedding index holds ---------

    def memory_pending(
        self,
        index_key: str,
        *,
        kinds: Collection[str] = (),
        any_status_kinds: Collection[str] = (),
        titled: Collection[str] = (),
        labelled: bool = True,
        limit: int = 256,
    ) -> list[d.Node]:
        """Blocks the index `index_key` does not hold yet, oldest first: those of `kinds`
        that are not alternates, those of `any_status_kinds` whatever their status, those
        whose header title is one of `titled`, and (with `labelled`) every block that ever
        had a label."""
        wanted: list[Any] = []
        if kinds:
            wanted.append(
                and_(
                    node_t.c.kind.in_(list(kinds)),
                    node_t.c.status.not_in(
                        [d.NodeStatus.ALTERNATE.value, d.NodeStatus.PROPOSED.value]
                    ),
                )
            )
        if any_status_kinds:
            wanted.append(node_t.c.kind.in_(list(any_status_kinds)))
        if titled:
            wanted.append(node_t.c.meta["title"].as_string().in_(list(titled)))
        if labelled:
            wanted.append(exists().where(label_t.c.node_id == node_t.c.id))
        if not wanted:
            return []
        held = exists().where(memory_t.c.node_id == node_t.c.id, memory_t.c.index_key == index_key)
        stmt = (
            select(*cv.NODE_LIGHT_COLUMNS)
            .where(or_(*wanted), ~held)
            .order_by(node_t.c.id)
            .limit(limit)
        )
        with self._read() as conn:
            return [cv.to_node(r) for r in conn.execute(stmt)]

    def add_memory_vectors(self, index_key: str, model: str, node_ids: Sequence[int]) -> list[int]:
        """Record that the index holds `node_ids`; returns their vector ids, in order."""
        if not node_ids:
            return []
        now = time.time()
        with self._write() as conn:
            if conn.dialect.name == "postgresql":
                ids = list(
                    conn.execute(
                        text(
                            "SELECT nextval(pg_get_serial_sequence('memory_vector', 'id')) "
                            "FROM generate_series(1, :n)"
                        ),
                        {"n": len(node_ids)},
                    ).scalars()
                )
            else:  # BEGIN IMMEDIATE holds the write lock: nobody else takes these ids
                top = conn.execute(select(func.max(memory_t.c.id))).scalar() or 0
                ids = list(range(top + 1, top + 1 + len(node_ids)))
            conn.execute(
                insert(memory_t),
                [
                    {
                        "id": vid,
                        "index_key": index_key,
                        "model": model,
                        "node_id": nid,
                        "created_at": now,
                    }
                    for vid, nid in zip(ids, node_ids, strict=True)
                ],
            )
        return ids

    def memory_vectors(
        self, index_key: str, vector_ids: Iterable[int] | None = None
    ) -> dict[int, tuple[int, int, str]]:
        """The vectors of the index `index_key` (all, or the named ones) whose node still
        exists: vector id -> (node id, session id, kind)."""
        stmt = (
            select(memory_t.c.id, node_t.c.id, node_t.c.session_id, node_t.c.kind)
            .join(node_t, node_t.c.id == memory_t.c.node_id)
            .where(memory_t.c.index_key == index_key)
        )
        found: dict[int, tuple[int, int, str]] = {}
        with self._read() as conn:
            if vector_ids is None:
                for vid, nid, sid, kind in conn.execute(stmt):
                    found[vid] = (nid, sid, kind)
                return found
            wanted = sorted(set(vector_ids))
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                for vid, nid, sid, kind in conn.execute(stmt.where(memory_t.c.id.in_(chunk))):
                    found[vid] = (nid, sid, kind)
        return found

    def delete_memory_vectors(self, index_key: str, vector_ids: Iterable[int] | None = None) -> int:
        """Forget the named vectors of an index (all of them without `vector_ids`)."""
        stmt = memory_t.delete().where(memory_t.c.index_key == index_key)
        with self._write() as conn:
            if vector_ids is None:
                return conn.execute(stmt).rowcount
            wanted = sorted(set(vector_ids))
            done = 0
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                done += conn.execute(stmt.where(memory_t.c.id.in_(chunk))).rowcount
            return done

    def memory_indexes(self) -> list[tuple[str, str, int]]:
        """(index key, model, vectors) for every index the store keeps a mapping for."""
        stmt = (
            select(memory_t.c.index_key, memory_t.c.model, func.count())
            .group_by(memory_t.c.index_key, memory_t.c.model)
            .order_by(memory_t.c.index_key)
        )
        with self._read() as conn:
            return [(k, m, int(n)) for k, m, n in conn.execute(stmt)]

    def effective_labels(self, node_ids: Iterable[int]) -> dict[int, d.LabelValue]:
        """For each of `node_ids` a label covers, the label's value: its own latest label,
        or a path label on it or on a descendant. Bad wins when both cover a block."""
        wanted = sorted(set(node_ids))
        if not wanted:
            return {}
        latest = (
            select(label_t.c.node_id, label_t.c.value, label_t.c.scope)
            .join(node_t, node_t.c.id == label_t.c.node_id)
            .where(
                _latest_label(),
                node_t.c.session_id.in_(
                    select(node_t.c.session_id).where(node_t.c.id.in_(wanted)).distinct()
                ),
            )
            .cte("latest")
        )
        up = node_t.alias("up")
        covered = (
            select(latest.c.node_id.label("id"), latest.c.value.label("value"))
            .where(latest.c.scope == d.LabelScope.PATH.value)
            .cte("covered", recursive=True)
        )
        covered = covered.union(
            select(up.c.parent_id, covered.c.value).where(
                up.c.id == covered.c.id, up.c.parent_id.is_not(None)
            )
        )
        stmt = union(
            select(latest.c.node_id, latest.c.value).where(latest.c.node_id.in_(wanted)),
            select(covered.c.id, covered.c.value).where(covered.c.id.in_(wanted)),
        )
        found: dict[int, d.LabelValue] = {}
        with self._read() as conn:
            for node_id, value in conn.execute(stmt):
                if found.get(node_id) is not d.LabelValue.BAD:
                    found[node_id] = d.LabelValue(value)
        return found


def _latest_label() -> Any:
    """The condition that makes a `label` row its node's effective label: not retracted,
    and no newer unretracted label on the same node (the latest wins)."""
    newer = label_t.alias("newer")
    return and_(
        label_t.c.retracted_at.is_(None),
        ~exists().where(
            newer.c.node_id == label_t.c.node_id,
            newer.c.retracted_at.is_(None),
            newer.c.id > label_t.c.id,
        ),
    )


class NodeOutline(NamedTuple):
    """A node without its text, scores, tokens or metadata (see `tree_outline`)."""

    id: int
    session_id: int
    parent_id: int | None
    tick: int
    kind: str
    author: d.Author
    status: d.NodeStatus
    edited_from_id: int | None
    created_at: float
    updated_at: float
