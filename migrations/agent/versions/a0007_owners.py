"""Owners: who created each session and run, and the user a session acts for.

Revision ID: a0007
Revises: a0006

``agent_sessions.owner`` and ``agent_runs.owner`` hold the caller that created the row (``kind:name``,
``agent_service.access``); ``agent_sessions.user_id``/``org_id`` the user it acts for, copied out of
``user_context`` so that a list can be filtered by them. Events, A2A tasks (runs) and contexts
(sessions) belong to their session's owner; memories name their session. ``agent_sessions.context_id``
is the A2A context id a client chose where another caller's session already had it as its id (the
session then has an id of its own): context ids never tell one caller of another's.

Expand only: rows that exist belong to the full-trust service that made them (``service:default``, what
every key was before callers had names), and so do rows a replica of the previous release inserts while
it drains (the server default); their user columns stay NULL (such a session is not a user token's).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "a0007"
down_revision = "a0006"
branch_labels = None
depends_on = None

LEGACY_PRINCIPAL = "service:default"


def upgrade() -> None:
    with op.batch_alter_table("agent_sessions") as batch:
        batch.add_column(sa.Column("owner", sa.String(160), nullable=False, server_default=LEGACY_PRINCIPAL))
        batch.add_column(sa.Column("user_id", sa.String(128), nullable=True))
        batch.add_column(sa.Column("org_id", sa.String(128), nullable=True))
        batch.add_column(sa.Column("context_id", sa.String(128), nullable=True))
    with op.batch_alter_table("agent_runs") as batch:
        batch.add_column(sa.Column("owner", sa.String(160), nullable=False, server_default=LEGACY_PRINCIPAL))
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute("UPDATE agent_sessions SET user_id = user_context::jsonb ->> 'user_id', "
                   "org_id = user_context::jsonb ->> 'org_id'")
    else:
        op.execute("UPDATE agent_sessions SET user_id = json_extract(user_context, '$.user_id'), "
                   "org_id = json_extract(user_context, '$.org_id')")
    # A caller's contexts, newest first (ListTasks); a user's, the same.
    op.create_index("ix_agent_sessions_owner_updated", "agent_sessions", ["owner", "updated_at"])
    op.create_index("ix_agent_sessions_user_updated", "agent_sessions", ["org_id", "user_id", "updated_at"])
    op.create_index("ix_agent_sessions_context_id", "agent_sessions", ["context_id"])


def downgrade() -> None:
    op.drop_index("ix_agent_sessions_context_id", table_name="agent_sessions")
    op.drop_index("ix_agent_sessions_user_updated", table_name="agent_sessions")
    op.drop_index("ix_agent_sessions_owner_updated", table_name="agent_sessions")
    with op.batch_alter_table("agent_runs") as batch:
        batch.drop_column("owner")
    with op.batch_alter_table("agent_sessions") as batch:
        batch.drop_column("context_id")
        batch.drop_column("org_id")
        batch.drop_column("user_id")
        batch.drop_column("owner")
