"""auth_sessions: the chat page's sessions when it signs in with the identity provider

Revision ID: c0009_auth_sessions
Revises: c0008_seq_without_redis
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "c0009_auth_sessions"
down_revision = "c0008_seq_without_redis"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "auth_sessions",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("org_id", sa.String(128), nullable=True),
        sa.Column("permissions", JSON, nullable=False),
        sa.Column("display_name", sa.String(200), nullable=False),
        sa.Column("sealed_tokens", sa.LargeBinary(), nullable=False),
        sa.Column("access_expires_at", TS, nullable=False),
        sa.Column("expires_at", TS, nullable=False),
        sa.Column("refreshing_until", TS, nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_auth_sessions"),
    )
    op.create_index("ix_auth_sessions_expires_at", "auth_sessions", ["expires_at"])


def downgrade() -> None:
    # Everyone signed in with the provider signs in again.
    op.drop_index("ix_auth_sessions_expires_at", table_name="auth_sessions")
    op.drop_table("auth_sessions")
