"""The knowledge base behind ``knowledge_search``: documents loaded from folders, full-text indexed.

``repository`` holds all SQL (FTS5 on SQLite, a tsvector column with a GIN index on PostgreSQL;
the schema comes from migration ``a0002``); ``indexer`` (re)loads the source folders idempotently.
"""
