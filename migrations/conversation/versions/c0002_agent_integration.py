"""agent integration: agent columns on messages/conversations, conversation_agent_sessions,
pending_interactions, dead_letters, conversation_summaries

The chat schema is extended, never replaced: c0001's tables only gain nullable columns, so a
downgrade to c0001 leaves every conversation and message intact.

Revision ID: c0002
Revises: c0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "c0002"
down_revision = "c0001"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TS = sa.DateTime(timezone=True)
NON_TERMINAL = "status IN ('ACTIVE', 'AWAITING_USER')"


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("agent_session_id", sa.String(128), nullable=True))
        batch.add_column(sa.Column("agent_metadata", JSON, nullable=True))
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("agent_status", sa.String(32), nullable=True))

    op.create_table(
        "conversation_agent_sessions",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("conversation_id", sa.String(36), nullable=False),
        sa.Column("agent_session_id", sa.String(128), nullable=True),
        sa.Column("profile_name", sa.String(128), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("last_interaction_at", TS, nullable=False),
        sa.Column("last_event_seq", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("pending_question_id", sa.String(128), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_conversation_agent_sessions"),
        sa.ForeignKeyConstraint(
            ["conversation_id"], ["conversations.id"],
            name="fk_conversation_agent_sessions_conversation_id", ondelete="CASCADE",
        ),
        sa.UniqueConstraint("agent_session_id", name="uq_conversation_agent_sessions_agent_session_id"),
        sa.CheckConstraint(
            "status IN ('ACTIVE', 'AWAITING_USER', 'COMPLETED', 'FAILED', 'ABANDONED')",
            name="ck_conversation_agent_sessions_status",
        ),
    )
    op.create_index(
        "ix_conversation_agent_sessions_conversation_id", "conversation_agent_sessions", ["conversation_id"]
    )
    op.create_index(
        "ix_conversation_agent_sessions_last_interaction_at",
        "conversation_agent_sessions",
        ["last_interaction_at"],
    )
    # At most one ACTIVE/AWAITING_USER session per conversation, on both dialects.
    op.create_index(
        "uq_conversation_agent_sessions_one_open",
        "conversation_agent_sessions",
        ["conversation_id"],
        unique=True,
        postgresql_where=sa.text(NON_TERMINAL),
        sqlite_where=sa.text(NON_TERMINAL),
    )

    op.create_table(
        "pending_interactions",
        sa.Column("question_id", sa.String(128), nullable=False),
        sa.Column("conversation_id", sa.String(36), nullable=False),
        sa.Column("agent_session_row_id", sa.String(36), nullable=False),
        sa.Column("agent_session_id", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("tool", sa.String(128), nullable=True),
        sa.Column("args", JSON, nullable=True),
        sa.Column("asked_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("answered_at", TS, nullable=True),
        sa.Column("answer_message_id", sa.String(36), nullable=True),
        sa.PrimaryKeyConstraint("question_id", name="pk_pending_interactions"),
        sa.ForeignKeyConstraint(
            ["conversation_id"], ["conversations.id"],
            name="fk_pending_interactions_conversation_id", ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["agent_session_row_id"], ["conversation_agent_sessions.id"],
            name="fk_pending_interactions_agent_session_row_id",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint("kind IN ('question', 'approval')", name="ck_pending_interactions_kind"),
        sa.CheckConstraint(
            "status IN ('PENDING', 'ANSWERED', 'EXPIRED')", name="ck_pending_interactions_status"
        ),
    )
    op.create_index("ix_pending_interactions_conversation_id", "pending_interactions", ["conversation_id"])
    op.create_index(
        "ix_pending_interactions_agent_session_row_id", "pending_interactions", ["agent_session_row_id"]
    )
    op.create_index("ix_pending_interactions_expires_at", "pending_interactions", ["expires_at"])

    op.create_table(
        "dead_letters",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("conversation_id", sa.String(36), nullable=False),
        sa.Column("message_id", sa.String(36), nullable=True),
        sa.Column("agent_session_id", sa.String(128), nullable=True),
        sa.Column("error_code", sa.String(64), nullable=False),
        sa.Column("error_detail", sa.Text(), nullable=False),
        sa.Column("payload", JSON, nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_dead_letters"),
    )
    op.create_index("ix_dead_letters_conversation_id", "dead_letters", ["conversation_id"])
    op.create_index("ix_dead_letters_created_at", "dead_letters", ["created_at"])

    op.create_table(
        "conversation_summaries",
        sa.Column("conversation_id", sa.String(36), nullable=False),
        sa.Column("covered_message_count", sa.Integer(), nullable=False),
        sa.Column("last_covered_message_id", sa.String(36), nullable=True),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("conversation_id", name="pk_conversation_summaries"),
        sa.ForeignKeyConstraint(
            ["conversation_id"], ["conversations.id"],
            name="fk_conversation_summaries_conversation_id", ondelete="CASCADE",
        ),
    )


def downgrade() -> None:
    op.drop_table("conversation_summaries")
    op.drop_index("ix_dead_letters_created_at", table_name="dead_letters")
    op.drop_index("ix_dead_letters_conversation_id", table_name="dead_letters")
    op.drop_table("dead_letters")
    op.drop_index("ix_pending_interactions_expires_at", table_name="pending_interactions")
    op.drop_index("ix_pending_interactions_agent_session_row_id", table_name="pending_interactions")
    op.drop_index("ix_pending_interactions_conversation_id", table_name="pending_interactions")
    op.drop_table("pending_interactions")
    op.drop_index("uq_conversation_agent_sessions_one_open", table_name="conversation_agent_sessions")
    op.drop_index(
        "ix_conversation_agent_sessions_last_interaction_at", table_name="conversation_agent_sessions"
    )
    op.drop_index("ix_conversation_agent_sessions_conversation_id", table_name="conversation_agent_sessions")
    op.drop_table("conversation_agent_sessions")
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("agent_status")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("agent_metadata")
        batch.drop_column("agent_session_id")
