"""Durably reserved seqs: the highest seq of a session any process may have shown.

Revision ID: a0004
Revises: a0003

A run publishes its events to live readers before their group commit. ``seq_reserved`` is raised in
the run's claim (and, rarely, extended by the run) before any seq above it is shown, and lowered
back to the session's last seq when the run ends normally. Whoever ends a run it did not execute
(recovery after a crash, a takeover) writes its ERROR above it, so no seq a reader saw is ever
reused. Existing rows get 0: their next seq is ``last_seq + 1`` as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "a0004"
down_revision = "a0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_sessions") as batch:
        batch.add_column(sa.Column("seq_reserved", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("agent_sessions") as batch:
        batch.drop_column("seq_reserved")
