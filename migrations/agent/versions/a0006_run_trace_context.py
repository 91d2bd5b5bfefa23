"""The trace context of a run: the W3C traceparent of the request that started it.

Revision ID: a0006
Revises: a0005

A run outlives the request that started it, and a later run of the session (the answer to its
question) is started by another request in another trace: it links to this one. NULL for runs
started with tracing off.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "a0006"
down_revision = "a0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_runs") as batch:
        batch.add_column(sa.Column("traceparent", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agent_runs") as batch:
        batch.drop_column("traceparent")
