"""Long-term memory: what each user told the agent, searchable by full text, per dialect.

Revision ID: a0005
Revises: a0004

One row per completed turn, for one (organisation, user); ``org_id`` is '' for users without an
organisation, so that the pair is a plain equality everywhere. SQLite: an FTS5 table over the
content (external content, kept in sync by triggers). PostgreSQL: a generated tsvector column with
a GIN index. The (org, user, created_at) index serves listing and deleting a user's memories.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "a0005"
down_revision = "a0004"
branch_labels = None
depends_on = None

SQLITE_UPGRADE = [
    ("CREATE VIRTUAL TABLE agent_memories_fts USING fts5("
     "content, content='agent_memories', content_rowid='id', tokenize='porter unicode61')"),
    ("CREATE TRIGGER agent_memories_ai AFTER INSERT ON agent_memories BEGIN "
     "INSERT INTO agent_memories_fts(rowid, content) VALUES (new.id, new.content); END"),
    ("CREATE TRIGGER agent_memories_ad AFTER DELETE ON agent_memories BEGIN "
     "INSERT INTO agent_memories_fts(agent_memories_fts, rowid, content) VALUES ('delete', old.id, old.content); END"),
    ("CREATE TRIGGER agent_memories_au AFTER UPDATE ON agent_memories BEGIN "
     "INSERT INTO agent_memories_fts(agent_memories_fts, rowid, content) VALUES ('delete', old.id, old.content); "
     "INSERT INTO agent_memories_fts(rowid, content) VALUES (new.id, new.content); END"),
]
SQLITE_DOWNGRADE = [
    "DROP TRIGGER IF EXISTS agent_memories_au",
    "DROP TRIGGER IF EXISTS agent_memories_ad",
    "DROP TRIGGER IF EXISTS agent_memories_ai",
    "DROP TABLE IF EXISTS agent_memories_fts",
]
POSTGRES_UPGRADE = [
    ("ALTER TABLE agent_memories ADD COLUMN search_vector tsvector "
     "GENERATED ALWAYS AS (to_tsvector('english', content)) STORED"),
    "CREATE INDEX ix_agent_memories_search_vector ON agent_memories USING gin (search_vector)",
]
POSTGRES_DOWNGRADE = [
    "DROP INDEX IF EXISTS ix_agent_memories_search_vector",
    "ALTER TABLE agent_memories DROP COLUMN IF EXISTS search_vector",
]


def upgrade() -> None:
    op.create_table(
        "agent_memories",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("org_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=True),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_agent_memories_owner", "agent_memories", ["org_id", "user_id", "created_at"])
    dialect = op.get_bind().dialect.name
    for statement in POSTGRES_UPGRADE if dialect == "postgresql" else SQLITE_UPGRADE:
        op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in POSTGRES_DOWNGRADE if dialect == "postgresql" else SQLITE_DOWNGRADE:
        op.execute(statement)
    op.drop_index("ix_agent_memories_owner", table_name="agent_memories")
    op.drop_table("agent_memories")
