"""One suite for every SummaryCache: in memory, and on conversation_summaries (SQLite, PostgreSQL)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker

from conversation_service.db.migrate import upgrade
from conversation_service.db.models import Conversation
from conversation_service.history.repository import DatabaseSummaryCache
from conversation_service.history.summary_cache import CachedSummary, InMemorySummaryCache, SummaryCache
from shared.db import create_engine, create_sessionmaker
from shared.protocol import utcnow
from shared.transactions import transaction


@pytest.fixture
async def db_sessionmaker(database_url: str) -> AsyncIterator[async_sessionmaker]:
    engine = create_engine(database_url)
    try:
        await upgrade(engine)
        yield create_sessionmaker(engine)
    finally:
        await engine.dispose()


async def _conversations(sessionmaker: async_sessionmaker | None, n: int) -> list[str]:
    if sessionmaker is None:
        return [f"c{i}" for i in range(n)]
    async with transaction(sessionmaker) as session:
        rows = [Conversation(owner_id="u1", title="t") for _ in range(n)]
        session.add_all(rows)
        await session.flush()
        return [row.id for row in rows]


def _entry(conversation_id: str, summary: str, covered: str, count: int) -> CachedSummary:
    return CachedSummary(
        conversation_id=conversation_id,
        summary=summary,
        last_covered_message_id=covered,
        covered_message_count=count,
        token_count=len(summary.split()),
        updated_at=utcnow().replace(microsecond=0),
    )


async def _exercise(cache: SummaryCache, ids: list[str]) -> None:
    a, b = ids
    assert isinstance(cache, SummaryCache)
    assert await cache.get(a) is None

    first = _entry(a, "they agreed on the budget", "m10", 11)
    await cache.put(first)
    assert await cache.get(a) == first
    assert await cache.get(b) is None

    refreshed = _entry(a, "they agreed on the budget and the date", "m12", 13)
    await cache.put(refreshed)
    assert await cache.get(a) == refreshed

    other = _entry(b, "another conversation", "m3", 4)
    await cache.put(other)
    assert await cache.get(b) == other
    assert await cache.get(a) == refreshed


async def test_in_memory_cache() -> None:
    await _exercise(InMemorySummaryCache(), await _conversations(None, 2))


async def test_in_memory_cache_is_bounded() -> None:
    cache = InMemorySummaryCache(max_entries=2)
    for cid in ("a", "b"):
        await cache.put(_entry(cid, "s", "m1", 1))
    await cache.get("a")  # a is now the most recently used
    await cache.put(_entry("c", "s", "m1", 1))
    assert await cache.get("b") is None
    assert await cache.get("a") is not None and await cache.get("c") is not None


async def test_database_cache(db_sessionmaker: async_sessionmaker) -> None:
    await _exercise(DatabaseSummaryCache(db_sessionmaker), await _conversations(db_sessionmaker, 2))


async def test_database_cache_is_shared_and_ignores_deleted_conversations(db_sessionmaker) -> None:
    (cid,) = await _conversations(db_sessionmaker, 1)
    writer, reader = DatabaseSummaryCache(db_sessionmaker), DatabaseSummaryCache(db_sessionmaker)
    entry = _entry(cid, "shared across replicas", "m5", 6)
    await writer.put(entry)
    assert await reader.get(cid) == entry
    # A conversation deleted meanwhile: nothing to cache, and no error for the caller.
    await writer.put(_entry("00000000-0000-0000-0000-000000000000", "orphan", "m1", 1))
    assert await reader.get("00000000-0000-0000-0000-000000000000") is None
    later = CachedSummary(
        conversation_id=cid,
        summary="newer",
        last_covered_message_id="m9",
        covered_message_count=10,
        token_count=1,
        updated_at=entry.updated_at + timedelta(minutes=1),
    )
    await reader.put(later)
    assert await writer.get(cid) == later


async def test_replicas_share_summaries_written_by_the_builtin_model(db_sessionmaker) -> None:
    """Two extractors (two replicas) on one database: the second reuses the first one's summary."""
    from conversation_service.history.extractor import HistoryExtractor
    from conversation_service.history.schemas import HistoryRecord
    from conversation_service.settings.history import HistorySettings
    from shared.llm.builtin import BuiltinProvider

    (cid,) = await _conversations(db_sessionmaker, 1)
    records = [
        HistoryRecord(
            id=f"m{i:03d}",
            role="user" if i % 2 == 0 else "assistant",
            content=f"My name is Ada. Note {i}: the budget for item {i} is {i * 10} euros.",
        )
        for i in range(40)
    ]
    settings = HistorySettings(strategy="summary", summary_trigger=20, summary_window=10)

    class CountingProvider:
        def __init__(self) -> None:
            self.inner = BuiltinProvider(first_token_delay=0, chunk_delay=0)
            self.name = self.inner.name
            self.calls = 0

        def stream(self, messages, **kwargs):
            self.calls += 1
            return self.inner.stream(messages, **kwargs)

        async def aclose(self) -> None:
            await self.inner.aclose()

    first_llm, second_llm = CountingProvider(), CountingProvider()
    first = HistoryExtractor(settings, llm=first_llm, summary_cache=DatabaseSummaryCache(db_sessionmaker))
    second = HistoryExtractor(settings, llm=second_llm, summary_cache=DatabaseSummaryCache(db_sessionmaker))

    written = await first.extract(cid, records)
    read = await second.extract(cid, records)

    assert written.stats.summary_used and written.stats.summary_refreshed
    summary = written.messages[0].content
    assert summary.startswith("Summary of the earlier conversation:\n") and len(summary) > 40
    assert (first_llm.calls, second_llm.calls) == (1, 0)
    assert read.messages == written.messages
    assert read.stats.summary_used and not read.stats.summary_refreshed
