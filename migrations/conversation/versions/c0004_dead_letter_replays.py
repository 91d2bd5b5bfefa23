"""dead letter replays: when a dead letter was replayed, and how the replayed turn ended

Nullable columns only: a downgrade drops them and leaves every dead letter intact.

Revision ID: c0004_dead_letter_replays
Revises: c0003
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "c0004_dead_letter_replays"
down_revision = "c0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("dead_letters") as batch:
        batch.add_column(sa.Column("replayed_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("replay_outcome", sa.String(32), nullable=True))
        batch.add_column(sa.Column("replay_detail", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("dead_letters") as batch:
        batch.drop_column("replay_detail")
        batch.drop_column("replay_outcome")
        batch.drop_column("replayed_at")
