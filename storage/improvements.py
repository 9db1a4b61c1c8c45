"""`TraceStore`'s improvement runs (`agent-console improve`): one row per run, its rounds'
steps in a JSON `state` that each finished step rewrites, so a run killed at any point
resumes from its last complete step."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import insert, select, update

from storage import converters as cv
from storage import domain as d
from storage.errors import NotFoundError
from storage.store_base import StoreBase, improvement_t


class ImprovementsMixin(StoreBase):
    def create_improvement(
        self, family: str, *, config: dict[str, Any], state: dict[str, Any] | None = None
    ) -> d.Improvement:
        now = time.time()
        with self.db.write() as conn:
            row = conn.execute(
                insert(improvement_t)
                .values(
                    family=family,
                    status="running",
                    config=config,
                    state=state or {},
                    created_at=now,
                    updated_at=now,
                )
                .returning(*cv.IMPROVEMENT_COLUMNS)
            ).one()
        return cv.to_improvement(row)

    def get_improvement(self, improvement_id: int) -> d.Improvement:
        with self.db.read() as conn:
            row = conn.execute(
                select(*cv.IMPROVEMENT_COLUMNS).where(improvement_t.c.id == improvement_id)
            ).first()
        if row is None:
            raise NotFoundError(f"no improvement run {improvement_id}")
        return cv.to_improvement(row)

    def update_improvement(
        self,
        improvement_id: int,
        *,
        status: str | None = None,
        state: dict[str, Any] | None = None,
    ) -> d.Improvement:
        values: dict[str, Any] = {"updated_at": time.time()}
        if status is not None:
            values["status"] = status
        if state is not None:
            values["state"] = state
        with self.db.write() as conn:
            row = conn.execute(
                update(improvement_t)
                .where(improvement_t.c.id == improvement_id)
                .values(values)
                .returning(*cv.IMPROVEMENT_COLUMNS)
            ).first()
        if row is None:
            raise NotFoundError(f"no improvement run {improvement_id}")
        return cv.to_improvement(row)

    def list_improvements(self, *, limit: int = 100) -> list[d.Improvement]:
        """Newest first."""
        stmt = select(*cv.IMPROVEMENT_COLUMNS).order_by(improvement_t.c.id.desc()).limit(limit)
        with self.db.read() as conn:
            return [cv.to_improvement(r) for r in conn.execute(stmt)]
