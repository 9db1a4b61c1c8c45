"""`TraceStore`'s bulk reads: training data paged out of the whole store, and a
session or a page of nodes at a time."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from sqlalchemy import Column, Row, Select, and_, case, func, or_, select, union

from storage import converters as cv
from storage import domain as d
from storage.checks import CheckCounts
from storage.store_base import (
    StoreBase,
    decision_t,
    evaluation_t,
    label_t,
    latest_label,
    node_t,
    session_t,
)


class BulkReadsMixin(StoreBase):
    """Reads for dataset builders, exports and the training rules: paged iterators over
    labels and decisions, and batched reads by session or by node ids."""

    # -- training data ----------------------------------------------------------------

    def iter_labelled(
        self, *, since: float | None = None, page_size: int = 500, with_tokens: bool = False
    ) -> Iterator[d.LabelledNode]:
        """Every node whose latest unretracted label was given at or after `since`, with
        that label, in node order. Pages by node id, one short read per page, so memory
        stays flat however large the store."""
        effective = latest_label()
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
            with self.db.read() as conn:
                rows = conn.execute(stmt.where(key > last).limit(page_size)).all()
            yield from rows
            if len(rows) < page_size:
                return
            last = rows[-1][key_at]

    # -- bulk reads a session or a page at a time -------------------------------------

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
        with self.db.read() as conn:
            return list(conn.execute(stmt).scalars())

    def nodes_containing(self, text: str, limit: int) -> list[int]:
        """The ids of the newest `limit` blocks whose text holds `text` as it is typed
        (LIKE: ASCII letters in any case; `%` and `_` are themselves)."""
        if not text:
            return []
        stmt = (
            select(node_t.c.id)
            .where(node_t.c.text.contains(text, autoescape=True))
            .order_by(node_t.c.id.desc())
            .limit(limit)
        )
        with self.db.read() as conn:
            return list(conn.execute(stmt).scalars())

    def sessions_by_id(self, session_ids: Iterable[int]) -> dict[int, d.Session]:
        """The named sessions (those that exist) in one query."""
        wanted = sorted(set(session_ids))
        if not wanted:
            return {}
        with self.db.read() as conn:
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
        with self.db.read() as conn:
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
        with self.db.read() as conn:
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
        with self.db.read() as conn:
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
        with self.db.read() as conn:
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
        with self.db.read() as conn:
            return [cv.to_node(r) for r in conn.execute(stmt)]

    def session_evaluation_marks(self, session_id: int) -> dict[int, CheckCounts]:
        """Per block of a session that has evaluation callbacks: how many passed, failed
        and raised (`storage.checks`, which the inspector counts with too). One query, for
        the tree's marks and its ticks' "N/M checks passed"."""
        raised = evaluation_t.c.error.is_not(None)
        errored = func.sum(case((raised, 1), else_=0))
        passed = func.sum(case((and_(~raised, evaluation_t.c.passed.is_(True)), 1), else_=0))
        stmt = (
            select(evaluation_t.c.node_id, passed, errored, func.count())
            .join(node_t, node_t.c.id == evaluation_t.c.node_id)
            .where(
                node_t.c.session_id == session_id,
                evaluation_t.c.kind == d.EvaluationKind.CALLBACK.value,
            )
            .group_by(evaluation_t.c.node_id)
        )
        with self.db.read() as conn:
            return {
                node_id: CheckCounts(int(ok), int(total - ok - bad), int(bad))
                for node_id, ok, bad, total in conn.execute(stmt)
            }

    def tree_outline(self, session_id: int) -> list[NodeOutline]:
        """Every node of a session as its place in the tree and its verdict fields, in id
        order: no text, scores or metadata (their JSON decoding is most of a `tree` load),
        so the training rules can recount a large session after every label."""
        columns = [getattr(node_t.c, name) for name in NodeOutline._fields]
        stmt = select(*columns).where(node_t.c.session_id == session_id).order_by(node_t.c.id)
        authors = {a.value: a for a in d.Author}
        statuses = {s.value: s for s in d.NodeStatus}
        with self.db.read() as conn:
            return [
                NodeOutline(
                    i, sid, parent, tick, kind, authors[a], statuses[st], orig, made, changed
                )
                for i, sid, parent, tick, kind, a, st, orig, made, changed in conn.execute(stmt)
            ]


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
