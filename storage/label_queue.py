"""`TraceStore`'s label queue: the blocks no label covers yet, and what labels cover."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import func, select, tuple_, union

from storage import converters as cv
from storage import domain as d
from storage.store_base import StoreBase, label_t, latest_label, node_t


def _blanks_to_spaces(text: Any) -> Any:
    """`text` with its line breaks and tabs as spaces (SQLite's and PostgreSQL's `trim`
    take spaces only)."""
    for blank in ("\n", "\r", "\t"):
        text = func.replace(text, blank, " ")
    return text


class LabelQueueMixin(StoreBase):
    """The queue of unlabelled branches, and the labels in effect on given nodes (a path
    label covers its node and every ancestor)."""

    # -- labelling: the queue of unlabelled branches ----------------------------------

    def label_queue(
        self,
        *,
        limit: int = 200,
        after: tuple[int, int, int] | None = None,
        offset: int = 0,
        session_id: int | None = None,
        kind: str = "action",
    ) -> list[d.Node]:
        """Blocks of `kind` (of any status, alternates too) with some text that no
        effective label covers (their own, or a path label on them or on a descendant):
        newest session first, then latest tick, then newest node. `after` is the (session id, tick, node id) of
        the last one seen, so the next page starts past it even while labels are given."""
        stmt = (
            select(*cv.NODE_LIGHT_COLUMNS)
            .where(*self._unlabelled(kind, session_id, after))
            .order_by(node_t.c.session_id.desc(), node_t.c.tick.desc(), node_t.c.id.desc())
            .limit(limit)
            .offset(offset)
        )
        with self.db.read() as conn:
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
        with self.db.read() as conn:
            return int(conn.execute(stmt).scalar_one())

    @staticmethod
    def _unlabelled(
        kind: str, session_id: int | None, after: tuple[int, int, int] | None
    ) -> list[Any]:
        # Only the operator's labels take a block off the queue: one the task's checks
        # labelled (`source`) stays, marked, for the operator to confirm or overrule.
        latest = (
            select(label_t.c.node_id, label_t.c.scope)
            .join(node_t, node_t.c.id == label_t.c.node_id)
            .where(latest_label(), label_t.c.source.is_(None))
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
            # a block with no text has nothing to judge (a toy model's A/B left hundreds)
            func.trim(_blanks_to_spaces(node_t.c.text)) != "",
            node_t.c.id.not_in(select(effective.c.node_id)),
            node_t.c.id.not_in(select(covered.c.id)),
        ]
        if session_id is not None:
            conditions.append(node_t.c.session_id == session_id)
        if after is not None:
            conditions.append(tuple_(node_t.c.session_id, node_t.c.tick, node_t.c.id) < after)
        return conditions

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
                latest_label(),
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
        with self.db.read() as conn:
            for node_id, value in conn.execute(stmt):
                if found.get(node_id) is not d.LabelValue.BAD:
                    found[node_id] = d.LabelValue(value)
        return found
