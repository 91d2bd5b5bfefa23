"""Durable runs: a run's checkpoint, and how many times it was continued after a crash.

Revision ID: a0008
Revises: a0007

``agent_runs.checkpoint`` holds where a run stands at the end of its last step, written in the
transaction of that step's events; a replica that finds the run orphaned continues it from there.
``agent_runs.continuations`` counts those continuations (a run is continued at most
``AGENT_SERVICE_MAX_CONTINUATIONS`` times). Expand only: replicas of the previous version write
neither column and end orphans as before while they drain.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "a0008"
down_revision = "a0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_runs") as batch:
        batch.add_column(sa.Column("checkpoint", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("continuations", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("agent_runs") as batch:
        batch.drop_column("continuations")
        batch.drop_column("checkpoint")
