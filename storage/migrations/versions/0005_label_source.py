"""Automatic labels: a label's source, None for the operator's, or what gave it (the
task's checks, `checks`).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("label") as table:
        table.add_column(sa.Column("source", sa.String(40)))


def downgrade() -> None:
    with op.batch_alter_table("label") as table:
        table.drop_column("source")
