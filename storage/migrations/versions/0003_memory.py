"""Retrieval memory: which node each vector of an embedding index holds.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory_vector",
        sa.Column("id", sa.Integer, primary_key=True),  # the vector's id in the index
        sa.Column("index_key", sa.String(64), nullable=False),
        sa.Column("model", sa.String(500), nullable=False),
        sa.Column(
            "node_id", sa.Integer, sa.ForeignKey("node.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.UniqueConstraint("index_key", "node_id", name="uq_memory_vector_node"),
    )
    op.create_index("ix_memory_vector_node", "memory_vector", ["node_id"])


def downgrade() -> None:
    op.drop_table("memory_vector")
