"""`TraceStore`'s batches: a tasks file run as a batch, and its tasks claimed by workers."""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import func, insert, select, update

from storage import converters as cv
from storage import domain as d
from storage.errors import NotFoundError
from storage.store_base import StoreBase, batch_t, batch_task_t, enum_value


class BatchesMixin(StoreBase):
    """Batches and their tasks."""

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
        with self.db.write() as conn:
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
        with self.db.read() as conn:
            row = conn.execute(select(*cv.BATCH_COLUMNS).where(batch_t.c.id == batch_id)).first()
        if row is None:
            raise NotFoundError(f"no batch {batch_id}")
        return cv.to_batch(row)

    def list_batches(self, *, source_hash: str | None = None, limit: int = 100) -> list[d.Batch]:
        """Newest first; `source_hash` keeps the batches of one tasks file."""
        stmt = select(*cv.BATCH_COLUMNS).order_by(batch_t.c.id.desc()).limit(limit)
        if source_hash is not None:
            stmt = stmt.where(batch_t.c.source_hash == source_hash)
        with self.db.read() as conn:
            return [cv.to_batch(r) for r in conn.execute(stmt)]

    def set_batch_status(self, batch_id: int, status: d.BatchStatus | str) -> d.Batch:
        value = enum_value(d.BatchStatus, status)
        now = time.time()
        finished = None if value is d.BatchStatus.RUNNING else now
        with self.db.write() as conn:
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
        with self.db.read() as conn:
            return [cv.to_batch_task(r) for r in conn.execute(stmt)]

    def batch_counts(self, batch_id: int) -> dict[d.BatchTaskStatus, int]:
        """How many of a batch's tasks are in each status (every status, 0 included)."""
        stmt = (
            select(batch_task_t.c.status, func.count())
            .where(batch_task_t.c.batch_id == batch_id)
            .group_by(batch_task_t.c.status)
        )
        counts = dict.fromkeys(d.BatchTaskStatus, 0)
        with self.db.read() as conn:
            for status, count in conn.execute(stmt):
                counts[d.BatchTaskStatus(status)] = count
        return counts

    def claim_batch_task(self, batch_id: int, worker: str) -> d.BatchTask | None:
        """Take up the batch's first open task (pending, or aborted: resumed) for `worker`,
        or None when none is left. Atomic: two workers never get the same task (SQLite
        writes one at a time; PostgreSQL skips rows another worker has locked)."""
        open_ = [s.value for s in d.BATCH_TASK_OPEN]
        now = time.time()
        with self.db.write() as conn:
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
        with self.db.write() as conn:
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
        value = enum_value(d.BatchTaskStatus, status)
        now = time.time()
        with self.db.write() as conn:
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
        with self.db.write() as conn:
            done = conn.execute(
                update(batch_task_t)
                .where(
                    batch_task_t.c.batch_id == batch_id,
                    batch_task_t.c.status == d.BatchTaskStatus.RUNNING.value,
                )
                .values(status=d.BatchTaskStatus.ABORTED.value, updated_at=time.time())
            )
            return done.rowcount
