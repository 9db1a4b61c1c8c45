"""Batch rollouts: a batch of tasks run as headless sessions, and each task's run.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "batch",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("source_hash", sa.String(64), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("config", Json, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float),
    )
    op.create_index("ix_batch_source", "batch", ["source_hash"])
    op.create_table(
        "batch_task",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "batch_id", sa.Integer, sa.ForeignKey("batch.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("line", sa.Integer, nullable=False),
        sa.Column("spec", Json, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("session_id", sa.Integer, sa.ForeignKey("session.id", ondelete="SET NULL")),
        sa.Column("worker", sa.String(200)),
        sa.Column("runs", sa.Integer, nullable=False),
        sa.Column("result", Json, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("started_at", sa.Float),
        sa.Column("finished_at", sa.Float),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.UniqueConstraint("batch_id", "line", name="uq_batch_task_line"),
    )
    op.create_index("ix_batch_task_status", "batch_task", ["batch_id", "status"])


def downgrade() -> None:
    op.drop_table("batch_task")
    op.drop_table("batch")
