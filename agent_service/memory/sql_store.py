"""The memory store on the Agent Service's database: full-text relevance with FTS5 on SQLite and a
tsvector on PostgreSQL (migration a0005), the approach of the knowledge base."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime

from sqlalchemy import Column, Integer, MetaData, String, Table, Text, delete, insert, select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from agent_service.memory.store import Candidate, Memory, Owner
from agent_service.tools.knowledge.repository import query_terms
from shared.db import UTCDateTime
from shared.transactions import autocommit, transaction

metadata = MetaData()

agent_memories = Table(
    "agent_memories",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("org_id", String(128), nullable=False),
    Column("user_id", String(128), nullable=False),
    Column("session_id", String(128)),
    Column("content", Text, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
)

# Words in nearly every memory (each is "User: ... Assistant: ..." about the user) that would make
# every memory of the owner a match; PostgreSQL's english configuration drops the pronouns itself.
MEMORY_STOP_WORDS = frozenset(["i", "me", "my", "mine", "you", "your", "yours", "user", "assistant", "remember", "that"])

_SQLITE_RECALL = text(
    """
    SELECT m.id, m.content, m.created_at, m.session_id, -bm25(agent_memories_fts) AS score
    FROM agent_memories_fts
    JOIN agent_memories AS m ON m.id = agent_memories_fts.rowid
    WHERE agent_memories_fts MATCH :query AND m.org_id = :org AND m.user_id = :user
    ORDER BY bm25(agent_memories_fts), m.id DESC
    LIMIT :limit
    """
).columns(id=Integer, content=Text, created_at=UTCDateTime(), session_id=String)
_POSTGRES_RECALL = text(
    """
    SELECT id, content, created_at, session_id,
           ts_rank_cd(search_vector, to_tsquery('english', :query), 32) AS score
    FROM agent_memories
    WHERE org_id = :org AND user_id = :user AND search_vector @@ to_tsquery('english', :query)
    ORDER BY score DESC, id DESC
    LIMIT :limit
    """
).columns(id=Integer, content=Text, created_at=UTCDateTime(), session_id=String)
# Built once: a statement built per call pays for its cache key on every run.
_REMEMBER = insert(agent_memories).returning(agent_memories.c.id)


class SqlMemoryStore:
    def __init__(self, sessionmaker: async_sessionmaker) -> None:
        self._sessionmaker = sessionmaker
        self._postgres = sessionmaker.kw["bind"].dialect.name == "postgresql"

    async def remember(self, owner: Owner, content: str, session_id: str | None, at: datetime) -> Memory:
        async with self._alone(write=True) as db:
            result = await db.execute(_REMEMBER, {
                "org_id": owner.org_key, "user_id": owner.user_id, "session_id": session_id, "content": content,
                "created_at": at,
            })
            return Memory(id=result.scalar_one(), content=content, created_at=at, session_id=session_id)

    async def recall(self, owner: Owner, query: str, limit: int) -> list[Candidate]:
        terms = [term for term in query_terms(query) if term not in MEMORY_STOP_WORDS]
        if not terms or limit <= 0:
            return []
        async with self._alone(write=False) as db:
            if self._postgres:
                statement, joined = _POSTGRES_RECALL, " | ".join(terms)
            else:
                statement, joined = _SQLITE_RECALL, " OR ".join(f'"{term}"' for term in terms)
            rows = await db.execute(
                statement, {"query": joined, "org": owner.org_key, "user": owner.user_id, "limit": limit}
            )
            return [
                Candidate(Memory(row.id, row.content, row.created_at, row.session_id), float(row.score))
                for row in rows
            ]

    @asynccontextmanager
    async def _alone(self, *, write: bool) -> AsyncIterator[AsyncSession]:
        """Where one statement runs by itself. PostgreSQL: in autocommit, as the statement is atomic
        alone: no BEGIN and COMMIT (or ROLLBACK) around it, two round trips of every run's recall and
        remember. SQLite: the session, in a transaction when it writes (a switch of mode would cost a
        hop to the driver's thread instead)."""
        if self._postgres:
            async with autocommit(self._sessionmaker) as db:
                yield db
        elif write:
            async with transaction(self._sessionmaker) as db:
                yield db
        else:
            async with self._sessionmaker() as db:
                yield db

    async def list(self, owner: Owner, limit: int) -> list[Memory]:
        async with self._sessionmaker() as db:
            rows = await db.execute(
                select(agent_memories).where(*_owned_by(owner))
                .order_by(agent_memories.c.created_at.desc(), agent_memories.c.id.desc()).limit(limit)
            )
            return [Memory(row.id, row.content, row.created_at, row.session_id) for row in rows]

    async def delete(self, owner: Owner, memory_id: int | None = None) -> int:
        statement = delete(agent_memories).where(*_owned_by(owner))
        if memory_id is not None:
            statement = statement.where(agent_memories.c.id == memory_id)
        async with transaction(self._sessionmaker) as db:
            return (await db.execute(statement)).rowcount or 0


def _owned_by(owner: Owner) -> tuple:
    return agent_memories.c.org_id == owner.org_key, agent_memories.c.user_id == owner.user_id
