"""`TraceStore`'s memory vectors: which node each vector of an embedding index holds."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from sqlalchemy import and_, exists, func, insert, or_, select, text

from storage import converters as cv
from storage import domain as d
from storage.store_base import StoreBase, label_t, memory_t, node_t


class MemoryVectorsMixin(StoreBase):
    """The retrieval memory's mapping from vector ids to nodes, per embedding index."""

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
        with self.db.read() as conn:
            return [cv.to_node(r) for r in conn.execute(stmt)]

    def add_memory_vectors(self, index_key: str, model: str, node_ids: Sequence[int]) -> list[int]:
        """Record that the index holds `node_ids`; returns their vector ids, in order."""
        if not node_ids:
            return []
        now = time.time()
        with self.db.write() as conn:
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
        with self.db.read() as conn:
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
        with self.db.write() as conn:
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
        with self.db.read() as conn:
            return [(k, m, int(n)) for k, m, n in conn.execute(stmt)]
