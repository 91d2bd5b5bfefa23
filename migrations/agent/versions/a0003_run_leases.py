"""Run ownership leases and cross-replica cancel requests.

Revision ID: a0003
Revises: a0002

Several replicas share one database. A run row records the process executing it (``owner_id``)
and until when that process vouches for it (``lease_expires_at``, renewed while the run is active);
recovery in any replica fails only runs whose lease has expired. ``cancel_requested_at`` carries a
cancel received by another replica to the owner. The index serves the recovery scan (ACTIVE runs
by lease expiry).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "a0003"
down_revision = "a0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_runs") as batch:
        batch.add_column(sa.Column("owner_id", sa.String(64), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("cancel_requested_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_agent_runs_status_lease", "agent_runs", ["status", "lease_expires_at"])


def downgrade() -> None:
    op.drop_index("ix_agent_runs_status_lease", table_name="agent_runs")
    with op.batch_alter_table("agent_runs") as batch:
        batch.drop_column("cancel_requested_at")
        batch.drop_column("lease_expires_at")
        batch.drop_column("owner_id")
