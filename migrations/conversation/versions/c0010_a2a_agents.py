"""conversation_agent_sessions.agent_name, .a2a_task_id: a conversation's agent may be an A2A agent

A conversation's agent session is with the Agent Service (``agent_name`` null) or with one of the A2A
agents of ``A2A_AGENTS`` (``agent_name``, its configured name). For an A2A agent,
``agent_session_id`` holds the A2A ``contextId`` and ``a2a_task_id`` the task of the last message:
what an answer to the agent's question continues, what a stop cancels and what a taken-over turn
subscribes to again.

Revision ID: c0010_a2a_agents
Revises: c0009_auth_sessions
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "c0010_a2a_agents"
down_revision = "c0009_auth_sessions"
branch_labels = None
depends_on = None


# Plain ALTER TABLE on both backends (see c0008): no batch copy of the table on SQLite.


def upgrade() -> None:
    op.add_column("conversation_agent_sessions", sa.Column("agent_name", sa.String(32), nullable=True))
    op.add_column("conversation_agent_sessions", sa.Column("a2a_task_id", sa.String(128), nullable=True))


def downgrade() -> None:
    # Sessions with an A2A agent read as the Agent Service's afterwards: end them first if any are open.
    op.drop_column("conversation_agent_sessions", "a2a_task_id")
    op.drop_column("conversation_agent_sessions", "agent_name")
