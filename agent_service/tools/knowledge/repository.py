"""All SQL of the knowledge base: document upserts and the ranked full-text query per dialect."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from sqlalchemy import Column, DateTime, Integer, MetaData, String, Table, Text, delete, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession

metadata = MetaData()

# The columns both dialects share (migration a0002); the per-dialect search structures are not
# mapped: they are only reached through the queries below.
knowledge_documents = Table(
    "knowledge_documents",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("path", String(512), nullable=False, unique=True),
    Column("title", String(512), nullable=False),
    Column("content", Text, nullable=False),
    Column("content_hash", String(64), nullable=False),
    Column("indexed_at", DateTime(timezone=True), nullable=False),
)

MAX_QUERY_TERMS = 32
MAX_TERM_CHARS = 64
# Dropped from queries so "what do the docs say about the breaker" ranks on "breaker" alone.
# PostgreSQL's english configuration drops these itself; FTS5 would match every document on "the".
STOP_WORDS = frozenset(
    ["a", "an", "and", "are", "as", "at", "be", "by", "do", "does", "for", "from", "how", "i", "in", "is", "it", "of", "on", "or", "say", "says", "the", "this", "to", "was", "what", "when", "where", "which", "who", "why", "with", "about", "docs", "documentation", "documents"]
)

_SQLITE_SEARCH = text(
    """
    SELECT d.title AS title, d.path AS path,
           snippet(knowledge_documents_fts, 1, '**', '**', '…', 24) AS snippet,
           -bm25(knowledge_documents_fts, 5.0, 1.0) AS score
    FROM knowledge_documents_fts
    JOIN knowledge_documents AS d ON d.id = knowledge_documents_fts.rowid
    WHERE knowledge_documents_fts MATCH :query
    ORDER BY bm25(knowledge_documents_fts, 5.0, 1.0), d.path
    LIMIT :limit
    """
)
# Rank first, then build headlines for the top rows only: ts_headline re-parses whole documents.
_POSTGRES_SEARCH = text(
    """
    WITH q AS (SELECT to_tsquery('english', :query) AS query),
    top AS (
        SELECT d.title, d.path, d.content, ts_rank_cd(d.search_vector, q.query, 32) AS score, q.query
        FROM knowledge_documents AS d, q
        WHERE d.search_vector @@ q.query
        ORDER BY score DESC, d.path
        LIMIT :limit
    )
    SELECT title, path,
           ts_headline('english', content, query,
                       'StartSel=**, StopSel=**, MaxWords=35, MinWords=12, MaxFragments=1') AS snippet,
           score
    FROM top
    ORDER BY score DESC, path
    """
)


@dataclass(frozen=True, slots=True)
class KnowledgeDocument:
    path: str
    title: str
    content: str
    content_hash: str


@dataclass(frozen=True, slots=True)
class SearchHit:
    title: str
    path: str
    snippet: str
    score: float


def query_terms(query: str) -> list[str]:
    """The words of a free-text query, safe to splice into FTS5 and tsquery syntax (word characters
    only), without stop words unless nothing else is left."""
    words = [w[:MAX_TERM_CHARS] for w in re.findall(r"\w+", query.lower())]
    meaningful = [w for w in words if w not in STOP_WORDS]
    unique = list(dict.fromkeys(meaningful or words))
    return unique[:MAX_QUERY_TERMS]


class KnowledgeRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    @property
    def _dialect(self) -> str:
        return self.session.get_bind().dialect.name

    async def hashes_by_path(self) -> dict[str, str]:
        rows = await self.session.execute(select(knowledge_documents.c.path, knowledge_documents.c.content_hash))
        return {path: content_hash for path, content_hash in rows}

    async def upsert(self, document: KnowledgeDocument) -> None:
        """Insert or replace by path; safe when two processes index the same folder at once."""
        insert = pg_insert if self._dialect == "postgresql" else sqlite_insert
        statement = insert(knowledge_documents).values(**asdict(document), indexed_at=datetime.now(UTC))
        statement = statement.on_conflict_do_update(
            index_elements=[knowledge_documents.c.path],
            set_={k: statement.excluded[k] for k in ("title", "content", "content_hash", "indexed_at")},
        )
        await self.session.execute(statement)

    async def delete_paths(self, paths: Iterable[str]) -> int:
        paths = list(paths)
        if not paths:
            return 0
        result = await self.session.execute(delete(knowledge_documents).where(knowledge_documents.c.path.in_(paths)))
        return result.rowcount or 0

    async def search(self, terms: list[str], limit: int) -> list[SearchHit]:
        """Documents matching any of ``terms``, best first (more and rarer terms rank higher; a hit in
        the title counts more than one in the body). ``terms`` come from ``query_terms``."""
        if not terms:
            return []
        if self._dialect == "postgresql":
            statement, query = _POSTGRES_SEARCH, " | ".join(terms)
        else:
            statement, query = _SQLITE_SEARCH, " OR ".join(f'"{term}"' for term in terms)
        rows = await self.session.execute(statement, {"query": query, "limit": limit})
        return [
            SearchHit(title=row.title, path=row.path, snippet=" ".join((row.snippet or "").split()),
                      score=round(float(row.score), 6))
            for row in rows
        ]
