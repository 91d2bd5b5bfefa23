"""conversations.seq_without_redis: frame seqs handed out from the database while Redis was away

With several replicas, frame seqs come from a Redis counter; with Redis away (restarted, cut off) a
replica takes each seq from the durable reservation instead and records the highest such seq here.
A Redis counter that lags it (Redis restarted, or another replica still counting there) is raised
above it before it hands out another seq, so no seq is ever handed out twice.

Revision ID: c0008_seq_without_redis
Revises: c0007_reply_control
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "c0008_seq_without_redis"
down_revision = "c0007_reply_control"
branch_labels = None
depends_on = None


# Plain ALTER TABLE on both backends (SQLite has DROP COLUMN since 3.35): a batch operation would
# copy and drop the conversations table on SQLite, and dropping it cascades to its messages.


def upgrade() -> None:
    op.add_column("conversations", sa.Column("seq_without_redis", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    # The reservation (seq_reserved) stays above every seq handed out: counting before c0008 starts there.
    op.drop_column("conversations", "seq_without_redis")
