"""The trace tree: sessions, nodes, decisions, labels, evaluations.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "session",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("title", sa.String(500), nullable=False),
        sa.Column("task", sa.Text, nullable=False),
        sa.Column("backend", sa.String(100)),
        sa.Column("model", sa.String(500)),
        sa.Column("adapter", sa.String(200)),
        sa.Column("settings", Json, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ix_session_updated", "session", ["updated_at"])

    op.create_table(
        "node",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "session_id",
            sa.Integer,
            sa.ForeignKey("session.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("parent_id", sa.Integer, sa.ForeignKey("node.id", ondelete="CASCADE")),
        sa.Column("tick", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(50), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("author", sa.String(20), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("score", sa.Float),
        sa.Column("score_parts", Json, nullable=False),
        sa.Column("token_ids", sa.LargeBinary),  # packed int32, see storage.models
        sa.Column("logprobs", sa.LargeBinary),  # packed float32
        sa.Column("sampling", Json, nullable=False),
        sa.Column("edited_from_id", sa.Integer, sa.ForeignKey("node.id", ondelete="SET NULL")),
        sa.Column("truncated", sa.Boolean, nullable=False),
        sa.Column("prompt_hash", sa.String(64)),
        sa.Column("meta", Json, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ix_node_session", "node", ["session_id", "id"])
    op.create_index("ix_node_parent", "node", ["parent_id"])
    op.create_index("ix_node_session_kind", "node", ["session_id", "kind"])
    op.create_index("ix_node_status", "node", ["status"])

    op.create_table(
        "decision",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "node_id", sa.Integer, sa.ForeignKey("node.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("verdict", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("actor", sa.String(20), nullable=False),
        sa.Column("result_node_id", sa.Integer, sa.ForeignKey("node.id", ondelete="SET NULL")),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_decision_node", "decision", ["node_id"])

    op.create_table(
        "label",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "node_id", sa.Integer, sa.ForeignKey("node.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("value", sa.String(10), nullable=False),
        sa.Column("scope", sa.String(10), nullable=False),
        sa.Column("note", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("retracted_at", sa.Float),
    )
    op.create_index("ix_label_node", "label", ["node_id", "id"])

    op.create_table(
        "evaluation",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "node_id", sa.Integer, sa.ForeignKey("node.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(500), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("result", Json),
        sa.Column("passed", sa.Boolean),
        sa.Column("error", sa.Text),
        sa.Column("duration", sa.Float),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_evaluation_node", "evaluation", ["node_id"])


def downgrade() -> None:
    for table in ("evaluation", "label", "decision", "node", "session"):
        op.drop_table(table)
