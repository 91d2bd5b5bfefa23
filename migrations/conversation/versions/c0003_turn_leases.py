"""crash safety: durably reserved frame seqs, turns owned under a lease

``conversations.seq_reserved``: the highest frame seq any replica may have handed out; raised
before a seq beyond it is used, so a seq seen by a client is never handed out again after a crash
(existing conversations start with their flushed ``last_seq``).

``turns``: one row per accepted message (its id is the user message's), owned by a replica under
a lease that the owner renews; a turn whose lease ran out is taken over by another replica.

Revision ID: c0003
Revises: c0002
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "c0003"
down_revision = "c0002"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("seq_reserved", sa.BigInteger(), server_default="0", nullable=False))
    op.execute("UPDATE conversations SET seq_reserved = last_seq")

    op.create_table(
        "turns",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("conversation_id", sa.String(36), nullable=False),
        sa.Column("kind", sa.String(16), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("owner_id", sa.String(64), nullable=True),
        sa.Column("lease_expires_at", TS, nullable=True),
        sa.Column("assistant_message_id", sa.String(36), nullable=True),
        sa.Column("agent_session_id", sa.String(128), nullable=True),
        sa.Column("agent_session_row_id", sa.String(36), nullable=True),
        sa.Column("last_agent_seq", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("takeovers", sa.Integer(), server_default="0", nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_turns"),
        sa.ForeignKeyConstraint(
            ["conversation_id"], ["conversations.id"], name="fk_turns_conversation_id", ondelete="CASCADE",
        ),
        sa.CheckConstraint("kind IN ('agent', 'direct')", name="ck_turns_kind"),
        sa.CheckConstraint("status IN ('running', 'done')", name="ck_turns_status"),
    )
    op.create_index("ix_turns_conversation_id", "turns", ["conversation_id"])
    op.create_index("ix_turns_status_lease_expires_at", "turns", ["status", "lease_expires_at"])


def downgrade() -> None:
    op.drop_index("ix_turns_status_lease_expires_at", table_name="turns")
    op.drop_index("ix_turns_conversation_id", table_name="turns")
    op.drop_table("turns")
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("seq_reserved")
