"""SQLAlchemy 2 tables of the trace store.

These mirror the latest migration in `storage/migrations/versions/`; the migrations, not
`metadata.create_all`, create the schema, and a test checks that the two agree.
Timestamps are UNIX seconds (float), the unit weave-agent traces use.
"""

from __future__ import annotations

import sys
from array import array
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeEngine


class _Json(TypeDecorator[Any]):
    """JSON, stored as JSONB on PostgreSQL. The PostgreSQL type is imported when a
    PostgreSQL dialect asks for it: importing `sqlalchemy.dialects.postgresql` also loads
    its drivers' dialects (~30 ms), which a SQLite console should not pay at start-up."""

    impl = JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import JSONB

            return dialect.type_descriptor(JSONB())
        return dialect.type_descriptor(JSON())


Json = _Json()


class PackedArray(TypeDecorator[list[Any]]):
    """A list of int32 or float32 as little-endian bytes.

    Completion token ids and logprobs are the bulk of a node: packed they take 4 bytes a
    token and cost almost nothing to write, where JSON text was most of the insert time.
    Logprobs keep float32 precision, which is what serving engines compute them in.
    """

    impl = LargeBinary
    cache_ok = True

    def __init__(self, typecode: str) -> None:
        super().__init__()
        self.typecode = typecode

    def process_bind_param(
        self, value: list[Any] | array[Any] | None, dialect: Dialect
    ) -> bytes | None:
        if value is None:
            return None
        packed = value if isinstance(value, array) else array(self.typecode, value)
        if sys.byteorder == "big":
            packed = array(self.typecode, packed)
            packed.byteswap()
        return packed.tobytes()

    def pack(self, value: list[Any] | None) -> array[Any] | None:
        """`value` in its stored form: `.tolist()` on it is what will read back (float32
        rounding included), and binding it skips a second conversion."""
        return None if value is None else array(self.typecode, value)

    def process_result_value(self, value: bytes | None, dialect: Dialect) -> list[Any] | None:
        if value is None:
            return None
        packed = array(self.typecode)
        packed.frombytes(value)
        if sys.byteorder == "big":
            packed.byteswap()
        return packed.tolist()


TokenIds = PackedArray("i")
Logprobs = PackedArray("f")


class Base(DeclarativeBase):
    pass


class SessionRow(Base):
    __tablename__ = "session"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    title: Mapped[str] = mapped_column(String(500), default="")
    task: Mapped[str] = mapped_column(Text, default="")
    backend: Mapped[str | None] = mapped_column(String(100))
    model: Mapped[str | None] = mapped_column(String(500))
    adapter: Mapped[str | None] = mapped_column(String(200))
    settings: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    status: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_session_updated", "updated_at"),)


class NodeRow(Base):
    __tablename__ = "node"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("session.id", ondelete="CASCADE"))
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("node.id", ondelete="CASCADE"))
    tick: Mapped[int] = mapped_column(Integer, default=0)
    kind: Mapped[str] = mapped_column(String(50))
    text: Mapped[str] = mapped_column(Text)
    author: Mapped[str] = mapped_column(String(20))
    status: Mapped[str] = mapped_column(String(20))
    score: Mapped[float | None] = mapped_column(Float)
    score_parts: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    token_ids: Mapped[list[int] | None] = mapped_column(TokenIds)
    logprobs: Mapped[list[float] | None] = mapped_column(Logprobs)
    sampling: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    edited_from_id: Mapped[int | None] = mapped_column(ForeignKey("node.id", ondelete="SET NULL"))
    truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    prompt_hash: Mapped[str | None] = mapped_column(String(64))
    meta: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (
        Index("ix_node_session", "session_id", "id"),
        Index("ix_node_parent", "parent_id"),
        Index("ix_node_session_kind", "session_id", "kind"),
        Index("ix_node_status", "status"),
    )


class DecisionRow(Base):
    __tablename__ = "decision"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("node.id", ondelete="CASCADE"))
    verdict: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str | None] = mapped_column(Text)
    actor: Mapped[str] = mapped_column(String(20))
    result_node_id: Mapped[int | None] = mapped_column(ForeignKey("node.id", ondelete="SET NULL"))
    created_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_decision_node", "node_id"),)


class LabelRow(Base):
    __tablename__ = "label"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("node.id", ondelete="CASCADE"))
    value: Mapped[str] = mapped_column(String(10))
    scope: Mapped[str] = mapped_column(String(10))
    note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    retracted_at: Mapped[float | None] = mapped_column(Float)
    #: None: the operator's; else what gave it (`checks`: the task's own checks)
    source: Mapped[str | None] = mapped_column(String(40))

    __table_args__ = (Index("ix_label_node", "node_id", "id"),)


class EvaluationRow(Base):
    __tablename__ = "evaluation"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("node.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(500))
    kind: Mapped[str] = mapped_column(String(20))
    result: Mapped[Any] = mapped_column(Json, nullable=True)  # as in migration 0001
    passed: Mapped[bool | None] = mapped_column(Boolean)
    error: Mapped[str | None] = mapped_column(Text)
    duration: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_evaluation_node", "node_id"),)


class JobRow(Base):
    __tablename__ = "job"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(10))
    name: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(20))
    base_model: Mapped[str | None] = mapped_column(String(500))
    config: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    metrics: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    pid: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_job_status", "status"),)


class JobEventRow(Base):
    __tablename__ = "job_event"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("job.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(20))
    step: Mapped[int | None] = mapped_column(Integer)
    message: Mapped[str | None] = mapped_column(Text)
    data: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    created_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_job_event_job", "job_id", "id"),)


class AdapterRow(Base):
    __tablename__ = "adapter"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    base_model: Mapped[str] = mapped_column(String(500))
    path: Mapped[str] = mapped_column(Text)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("job.id", ondelete="SET NULL"))
    metrics: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    created_at: Mapped[float] = mapped_column(Float)


class MemoryVectorRow(Base):
    """One vector of a retrieval-memory index: its id in the index (this row's id), the
    node it embeds, the index file it lives in (`index_key`, written in the file's
    header) and the embedding model that made it."""

    __tablename__ = "memory_vector"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    index_key: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(500))
    node_id: Mapped[int] = mapped_column(ForeignKey("node.id", ondelete="CASCADE"))
    created_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (
        UniqueConstraint("index_key", "node_id", name="uq_memory_vector_node"),
        Index("ix_memory_vector_node", "node_id"),
    )


class BatchRow(Base):
    """A batch of tasks run as headless sessions (`agent-console batch`)."""

    __tablename__ = "batch"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    source: Mapped[str] = mapped_column(Text)
    source_hash: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(20))
    config: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)

    __table_args__ = (Index("ix_batch_source", "source_hash"),)


class BatchTaskRow(Base):
    """One task of a batch: its line of the tasks file, its session and how it went."""

    __tablename__ = "batch_task"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    batch_id: Mapped[int] = mapped_column(ForeignKey("batch.id", ondelete="CASCADE"))
    line: Mapped[int] = mapped_column(Integer)
    spec: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    status: Mapped[str] = mapped_column(String(20))
    session_id: Mapped[int | None] = mapped_column(ForeignKey("session.id", ondelete="SET NULL"))
    worker: Mapped[str | None] = mapped_column(String(200))
    runs: Mapped[int] = mapped_column(Integer, default=0)
    result: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (
        UniqueConstraint("batch_id", "line", name="uq_batch_task_line"),
        Index("ix_batch_task_status", "batch_id", "status"),
    )


class ImprovementRow(Base):
    """A run of `agent-console improve`: its rounds' steps, in `state`."""

    __tablename__ = "improvement"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    family: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(20))
    config: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    state: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
