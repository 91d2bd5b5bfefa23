"""turns.traceparent: the trace context of the message a turn answers

Revision ID: c0011_turn_trace_context
Revises: c0010_a2a_agents
Create Date: 2026-11-28

Stored in the transaction that accepts the message, so a turn taken over by another replica, or
answered again (a dead letter's replay), links to the trace of its message. NULL with tracing off.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "c0011_turn_trace_context"
down_revision = "c0010_a2a_agents"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.add_column(sa.Column("traceparent", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("traceparent")
