"""conversations.deleted_at: a deleted conversation is hidden, not erased at once

A reply may still be streaming into a conversation when its owner deletes it; its turn keeps
writing frames and the final message. Marking the row instead of deleting it (and, through the
foreign keys, its messages and frames) lets that turn end without a failed write, while every read
of the conversation answers 404 from the moment of the delete.

Revision ID: c0006
Revises: c0004_dead_letter_replays
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "c0006"
down_revision = "c0004_dead_letter_replays"
branch_labels = None
depends_on = None


# Plain ALTER TABLE on both backends (SQLite has DROP COLUMN since 3.35): a batch operation would
# copy and drop the conversations table on SQLite, and dropping it cascades to its messages.


def upgrade() -> None:
    op.add_column("conversations", sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    # Deleted conversations come back on a downgrade: the schema before c0006 cannot hide them.
    op.drop_column("conversations", "deleted_at")
