"""Knowledge documents with full-text search, per dialect.

Revision ID: a0002
Revises: a0001

SQLite: an FTS5 table over ``knowledge_documents`` (external content, kept in sync by triggers).
PostgreSQL: a generated ``search_vector`` tsvector column (title weighted above content) with a
GIN index.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "a0002"
down_revision = "a0001"
branch_labels = None
depends_on = None

SQLITE_UPGRADE = [
    # porter: "retries" finds "retry"; unicode61 folds case and accents.
    ("CREATE VIRTUAL TABLE knowledge_documents_fts USING fts5("
    "title, content, content='knowledge_documents', content_rowid='id', tokenize='porter unicode61')"),
    ("CREATE TRIGGER knowledge_documents_ai AFTER INSERT ON knowledge_documents BEGIN "
    "INSERT INTO knowledge_documents_fts(rowid, title, content) VALUES (new.id, new.title, new.content); END"),
    ("CREATE TRIGGER knowledge_documents_ad AFTER DELETE ON knowledge_documents BEGIN "
    "INSERT INTO knowledge_documents_fts(knowledge_documents_fts, rowid, title, content) "
    "VALUES ('delete', old.id, old.title, old.content); END"),
    ("CREATE TRIGGER knowledge_documents_au AFTER UPDATE ON knowledge_documents BEGIN "
    "INSERT INTO knowledge_documents_fts(knowledge_documents_fts, rowid, title, content) "
    "VALUES ('delete', old.id, old.title, old.content); "
    "INSERT INTO knowledge_documents_fts(rowid, title, content) VALUES (new.id, new.title, new.content); END"),
]
SQLITE_DOWNGRADE = [
    "DROP TRIGGER IF EXISTS knowledge_documents_au",
    "DROP TRIGGER IF EXISTS knowledge_documents_ad",
    "DROP TRIGGER IF EXISTS knowledge_documents_ai",
    "DROP TABLE IF EXISTS knowledge_documents_fts",
]
POSTGRES_UPGRADE = [
    ("ALTER TABLE knowledge_documents ADD COLUMN search_vector tsvector GENERATED ALWAYS AS ("
    "setweight(to_tsvector('english', coalesce(title, '')), 'A') || "
    "setweight(to_tsvector('english', coalesce(content, '')), 'B')) STORED"),
    "CREATE INDEX ix_knowledge_documents_search_vector ON knowledge_documents USING gin (search_vector)",
]
POSTGRES_DOWNGRADE = [
    "DROP INDEX IF EXISTS ix_knowledge_documents_search_vector",
    "ALTER TABLE knowledge_documents DROP COLUMN IF EXISTS search_vector",
]


def upgrade() -> None:
    op.create_table(
        "knowledge_documents",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("path", sa.String(512), nullable=False),
        sa.Column("title", sa.String(512), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("indexed_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("path", name="uq_knowledge_documents_path"),
    )
    dialect = op.get_bind().dialect.name
    for statement in POSTGRES_UPGRADE if dialect == "postgresql" else SQLITE_UPGRADE:
        op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    for statement in POSTGRES_DOWNGRADE if dialect == "postgresql" else SQLITE_DOWNGRADE:
        op.execute(statement)
    op.drop_table("knowledge_documents")
