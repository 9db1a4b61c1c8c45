"""`TraceStore`'s nodes: the blocks of a session's trace tree, added in batches and walked."""

from __future__ import annotations

import time
from array import array
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, func, insert, literal, select, text, update

from storage import converters as cv
from storage import domain as d
from storage.errors import NotFoundError
from storage.models import Logprobs, TokenIds
from storage.store_base import StoreBase, enum_value, node_t, session_t


def _unpack(packed: array[Any] | None) -> list[Any] | None:
    return None if packed is None else packed.tolist()


class NodesMixin(StoreBase):
    """Nodes: add (a whole subtree in one call), read, walk and update the blocks of a tree."""

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
        with self.db.write() as conn:
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
            "author": enum_value(d.Author, n.author).value,
            "status": enum_value(d.NodeStatus, n.status).value,
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
        with self.db.read() as conn:
            row = conn.execute(select(*cv.NODE_COLUMNS).where(node_t.c.id == node_id)).first()
        if row is None:
            raise NotFoundError(f"no node {node_id}")
        return cv.to_node(row, with_tokens=True)

    def children(self, node_id: int, *, with_tokens: bool = False) -> list[d.Node]:
        columns = cv.NODE_COLUMNS if with_tokens else cv.NODE_LIGHT_COLUMNS
        with self.db.read() as conn:
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
        with self.db.read() as conn:
            rows = conn.execute(stmt).all()
        if not rows:
            raise NotFoundError(f"no node {node_id}")
        return [cv.to_node(r, with_tokens) for r in rows]

    def tree(self, session_id: int, *, with_tokens: bool = False) -> list[d.Node]:
        """Every node of a session in one query, parents before children (id order)."""
        columns = cv.NODE_COLUMNS if with_tokens else cv.NODE_LIGHT_COLUMNS
        with self.db.read() as conn:
            rows = conn.execute(
                select(*columns).where(node_t.c.session_id == session_id).order_by(node_t.c.id)
            ).all()
        return [cv.to_node(r, with_tokens) for r in rows]

    def count_nodes(self, session_id: int) -> int:
        with self.db.read() as conn:
            return conn.execute(
                select(func.count()).select_from(node_t).where(node_t.c.session_id == session_id)
            ).scalar_one()

    def set_node_status(self, node_id: int, status: d.NodeStatus | str) -> None:
        value = enum_value(d.NodeStatus, status).value
        with self.db.write() as conn:
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
            values["status"] = enum_value(d.NodeStatus, status).value
        with self.db.write() as conn:
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
