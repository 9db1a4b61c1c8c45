"""`TraceStore`'s jobs, job events and adapters: training runs and what they produce."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.dml import Insert, Update

from storage import converters as cv
from storage import domain as d
from storage.errors import NotFoundError, StoreError
from storage.store_base import StoreBase, adapter_t, enum_value, job_event_t, job_t

_JOB_FIELDS = {"status", "progress", "metrics", "pid", "error", "config", "base_model", "name"}
_FINISHED = {d.JobStatus.COMPLETED, d.JobStatus.FAILED, d.JobStatus.CANCELLED}


class JobsMixin(StoreBase):
    """Jobs (training and evaluation runs), their events, and the adapter registry."""

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
            "kind": enum_value(d.JobKind, kind).value,
            "name": name,
            "status": d.JobStatus.QUEUED.value,
            "base_model": base_model,
            "config": config or {},
            "progress": 0.0,
            "metrics": {},
            "created_at": now,
            "updated_at": now,
        }
        with self.db.write() as conn:
            row = conn.execute(insert(job_t).values(values).returning(*cv.JOB_COLUMNS))
            return cv.to_job(row.one())

    def get_job(self, job_id: int) -> d.Job:
        with self.db.read() as conn:
            row = conn.execute(select(*cv.JOB_COLUMNS).where(job_t.c.id == job_id)).first()
        if row is None:
            raise NotFoundError(f"no job {job_id}")
        return cv.to_job(row)

    def list_jobs(
        self, *, status: d.JobStatus | str | None = None, limit: int = 100
    ) -> list[d.Job]:
        stmt = select(*cv.JOB_COLUMNS).order_by(job_t.c.id.desc()).limit(limit)
        if status is not None:
            stmt = stmt.where(job_t.c.status == enum_value(d.JobStatus, status).value)
        with self.db.read() as conn:
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
            status = enum_value(d.JobStatus, changes["status"])
            values["status"] = status.value
            if status is d.JobStatus.RUNNING:
                values["started_at"] = func.coalesce(job_t.c.started_at, now)
                values["finished_at"] = None
            elif status in _FINISHED:
                values["finished_at"] = now
        with self.db.write() as conn:
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
        with self.db.write() as conn:
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
        with self.db.read() as conn:
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
        with self.db.write() as conn:
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
        with self.db.read() as conn:
            row = conn.execute(select(*cv.ADAPTER_COLUMNS).where(adapter_t.c.name == name)).first()
        if row is None:
            raise NotFoundError(f"no adapter named {name!r}")
        return cv.to_adapter(row)

    def list_adapters(self) -> list[d.Adapter]:
        with self.db.read() as conn:
            rows = conn.execute(select(*cv.ADAPTER_COLUMNS).order_by(adapter_t.c.id.desc())).all()
        return [cv.to_adapter(r) for r in rows]
