"""Improvement between sessions: a label's source (None for the operator's, or what gave
it: the task's checks, `checks`), and the `improvement` runs of `agent-console improve`.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("label") as table:
        table.add_column(sa.Column("source", sa.String(40)))
    op.create_table(
        "improvement",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("family", sa.String(100), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("config", Json, nullable=False),
        sa.Column("state", Json, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("improvement")
    with op.batch_alter_table("label") as table:
        table.drop_column("source")
