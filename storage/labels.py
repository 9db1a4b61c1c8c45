"""`TraceStore`'s decisions, labels and evaluations: what was said about one node."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, func, insert, select, update

from storage import converters as cv
from storage import domain as d
from storage.errors import NotFoundError, StoreError
from storage.store_base import (
    StoreBase,
    decision_t,
    enum_value,
    evaluation_t,
    label_t,
    latest_label,
    node_t,
)


class LabelsMixin(StoreBase):
    """Approval-gate decisions, labels (with their history) and evaluation results."""

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
            "verdict": enum_value(d.Verdict, verdict).value,
            "actor": enum_value(d.Actor, actor).value,
            "reason": reason,
            "result_node_id": result_node_id,
            "created_at": time.time(),
        }
        with self.db.write() as conn:
            self._require_nodes(conn, {node_id, result_node_id})
            row = conn.execute(insert(decision_t).values(values).returning(*cv.DECISION_COLUMNS))
            return cv.to_decision(row.one())

    def decisions(self, node_id: int) -> list[d.Decision]:
        with self.db.read() as conn:
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
        source: str | None = None,
    ) -> d.Label:
        """Label a block (or the whole path to it). Earlier labels stay as history; the
        latest one that is not retracted is the node's label, except that an operator's
        label (no `source`) outranks every automatic one (`source="checks"`)."""
        values = {
            "node_id": node_id,
            "value": enum_value(d.LabelValue, value).value,
            "scope": enum_value(d.LabelScope, scope).value,
            "note": note,
            "created_at": time.time(),
            "retracted_at": None,
            "source": source,
        }
        with self.db.write() as conn:
            self._require_nodes(conn, {node_id})
            row = conn.execute(insert(label_t).values(values).returning(*cv.LABEL_COLUMNS))
            return cv.to_label(row.one())

    def retract_label(self, label_id: int) -> d.Label:
        """Undo a label: it stays in the history, marked retracted; the node falls back
        to its previous label, if any."""
        with self.db.write() as conn:
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
        with self.db.read() as conn:
            row = conn.execute(
                select(*cv.LABEL_COLUMNS).where(label_t.c.node_id == node_id, latest_label())
            ).first()
        return cv.to_label(row) if row else None

    def automatic_labels(self, node_ids: Iterable[int]) -> dict[int, d.Label]:
        """The automatic label in effect on each of `node_ids` that has one (and no
        operator's label outranking it)."""
        wanted = sorted(set(node_ids))
        if not wanted:
            return {}
        stmt = select(*cv.LABEL_COLUMNS).where(
            label_t.c.node_id.in_(wanted), label_t.c.source.is_not(None), latest_label()
        )
        with self.db.read() as conn:
            return {lab.node_id: lab for lab in map(cv.to_label, conn.execute(stmt))}

    def count_automatic_labels(self) -> int:
        """How many blocks carry an automatic label in effect (none of the operator's)."""
        stmt = select(func.count()).where(label_t.c.source.is_not(None), latest_label())
        with self.db.read() as conn:
            return int(conn.execute(stmt).scalar_one())

    def label_history(self, node_id: int) -> list[d.Label]:
        with self.db.read() as conn:
            rows = conn.execute(
                select(*cv.LABEL_COLUMNS).where(label_t.c.node_id == node_id).order_by(label_t.c.id)
            ).all()
        return [cv.to_label(r) for r in rows]

    def session_labels(self, session_id: int) -> dict[int, d.Label]:
        """The effective label of every labelled node in a session (for tree marks)."""
        stmt = (
            select(*cv.LABEL_COLUMNS)
            .join(node_t, node_t.c.id == label_t.c.node_id)
            .where(node_t.c.session_id == session_id, latest_label())
            .order_by(label_t.c.id)
        )
        with self.db.read() as conn:
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
            "kind": enum_value(d.EvaluationKind, kind).value,
            "result": result,
            "passed": passed,
            "error": error,
            "duration": duration,
            "created_at": time.time(),
        }
        with self.db.write() as conn:
            self._require_nodes(conn, {node_id})
            row = conn.execute(
                insert(evaluation_t).values(values).returning(*cv.EVALUATION_COLUMNS)
            )
            return cv.to_evaluation(row.one())

    def evaluations(self, node_id: int) -> list[d.EvaluationResult]:
        with self.db.read() as conn:
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
