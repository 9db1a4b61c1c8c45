"""The base of `TraceStore`: the `Database` (the engines, one short transaction per write
and one short connection per read), and the table handles and helpers every aggregate
uses.

Every write is one short transaction on the writer engine (`BEGIN IMMEDIATE` on SQLite);
every read a short connection on the reader engine. Nothing here holds a transaction
open between calls, so a long-lived console doesn't make the WAL grow, and iterators page
with keysets instead of holding a cursor.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any, Self, TypeVar, cast

from sqlalchemy import Table, and_, exists, or_

from storage.engine import create_engines, database_url, sqlite_path
from storage.migrate import ensure_schema
from storage.models import (
    AdapterRow,
    BatchRow,
    BatchTaskRow,
    DecisionRow,
    EvaluationRow,
    ImprovementRow,
    JobEventRow,
    JobRow,
    LabelRow,
    MemoryVectorRow,
    NodeRow,
    SessionRow,
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
improvement_t = cast(Table, ImprovementRow.__table__)
batch_task_t = cast(Table, BatchTaskRow.__table__)

E = TypeVar("E", bound=StrEnum)


def enum_value(kind: type[E], value: str | E) -> E:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise ValueError(f"{value!r} is not a valid {kind.__name__} ({allowed})") from None


def latest_label() -> Any:
    """The condition that makes a `label` row its node's effective label: not retracted,
    and no other unretracted label on the same node outranks it. The operator's labels
    outrank automatic ones (a `source`); among the same kind, the latest wins."""
    other = label_t.alias("other")
    mine_automatic = label_t.c.source.is_not(None)
    other_operator = other.c.source.is_(None)
    same_kind = or_(and_(other_operator, ~mine_automatic), and_(~other_operator, mine_automatic))
    return and_(
        label_t.c.retracted_at.is_(None),
        ~exists().where(
            other.c.node_id == label_t.c.node_id,
            other.c.retracted_at.is_(None),
            or_(and_(other_operator, mine_automatic), and_(same_kind, other.c.id > label_t.c.id)),
        ),
    )


class Database:
    """The store's engines: `write()` is a write transaction, `read()` a short read
    connection; every aggregate of `TraceStore` reaches the tables through these."""

    def __init__(self, db: str | Path) -> None:
        self.url = database_url(db)
        path = sqlite_path(self.url)
        self.where = str(path) if path is not None else self.url
        self.writer, self.reader = create_engines(self.url)
        try:
            ensure_schema(self.writer, where=self.where)
        except BaseException:
            self.close()
            raise

    def write(self):  # -> context manager yielding a Connection in a write transaction
        return self.writer.begin()

    def read(self):
        return self.reader.connect()

    def health(self) -> dict[str, str]:
        """Where the store is, its schema revision, and for SQLite the journal mode and
        `PRAGMA quick_check`."""
        from storage.migrate import current_revision

        with self.read() as conn:
            report = {"where": self.where, "schema": str(current_revision(conn))}
            if sqlite_path(self.url) is not None:
                report["journal_mode"] = str(conn.exec_driver_sql("PRAGMA journal_mode").scalar())
                report["integrity"] = str(conn.exec_driver_sql("PRAGMA quick_check").scalar())
        return report

    def close(self) -> None:
        self.writer.dispose()
        self.reader.dispose()


class StoreBase:
    """What every aggregate of `TraceStore` shares: its `Database`, and the store as a
    context manager."""

    def __init__(self, db: str | Path) -> None:
        self.db = Database(db)
        self.url = self.db.url
        self.where = self.db.where

    def health(self) -> dict[str, str]:
        """What `agent-console doctor` reports (`Database.health`)."""
        return self.db.health()

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
