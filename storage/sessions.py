"""`TraceStore`'s sessions: create, read, list and set the status of a session."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import insert, select, update

from storage import converters as cv
from storage import domain as d
from storage.errors import NotFoundError
from storage.store_base import StoreBase, enum_value, session_t


class SessionsMixin(StoreBase):
    """Sessions: one run of the agent on a task, the root of a trace tree."""

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
            "status": enum_value(d.SessionStatus, status).value,
            "created_at": now,
            "updated_at": now,
        }
        with self.db.write() as conn:
            row = conn.execute(insert(session_t).values(values).returning(*cv.SESSION_COLUMNS))
            return cv.to_session(row.one())

    def get_session(self, session_id: int) -> d.Session:
        with self.db.read() as conn:
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
            stmt = stmt.where(session_t.c.status == enum_value(d.SessionStatus, status).value)
        with self.db.read() as conn:
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
        with self.db.read() as conn:
            return [cv.to_session(r) for r in conn.execute(stmt)]

    def set_session_status(
        self,
        session_id: int,
        status: d.SessionStatus | str,
        *,
        reason: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> None:
        """Set the status; a `reason` (why it failed, was truncated, ...) is kept in the
        session's settings as `status_reason`, replacing the last one ("" removes it);
        `settings`: keys of the session's settings to set with it (the process that runs
        it now)."""
        value = enum_value(d.SessionStatus, status).value
        changes: dict[str, Any] = {"status": value, "updated_at": time.time()}
        with self.db.write() as conn:
            if reason is not None or settings:
                stored = conn.execute(
                    select(session_t.c.settings).where(session_t.c.id == session_id)
                ).scalar()
                merged = {**(stored or {}), **(settings or {})}
                changes["settings"] = (
                    d.with_status_reason(merged, reason) if reason is not None else merged
                )
            done = conn.execute(
                update(session_t).where(session_t.c.id == session_id).values(**changes)
            )
            if done.rowcount == 0:
                raise NotFoundError(f"no session {session_id}")
