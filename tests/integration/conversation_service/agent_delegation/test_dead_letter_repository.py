"""dead_letters on SQLite and PostgreSQL, migrated to head: a replay's claim is won once, also by
one of many claims racing for the same letter, and the listing the operator reads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker

from conversation_service.agent_delegation.repository import DeadLetterRepository
from conversation_service.db.migrate import upgrade
from conversation_service.db.models import utcnow
from shared.db import create_engine, create_sessionmaker
from shared.transactions import transaction


@pytest.fixture
async def sessionmaker(database_url: str) -> AsyncIterator[async_sessionmaker]:
    engine = create_engine(database_url, pool_size=10)
    try:
        await upgrade(engine)
        yield create_sessionmaker(engine)
    finally:
        await engine.dispose()


async def add_letter(sessionmaker: async_sessionmaker, message_id: str = "m-1") -> str:
    async with transaction(sessionmaker) as session:
        letter = await DeadLetterRepository(session).add(
            conversation_id="c-1", message_id=message_id, agent_session_id=None, error_code="AgentConnectError",
            error_detail="connection refused", payload={"message": "what is 17*23"}, attempts=3,
        )
        return letter.id


async def claim(sessionmaker: async_sessionmaker, letter_id: str) -> bool:
    async with transaction(sessionmaker) as session:
        return await DeadLetterRepository(session).claim_replay(letter_id, utcnow())


async def test_of_many_concurrent_claims_exactly_one_wins(sessionmaker: async_sessionmaker) -> None:
    letter_id = await add_letter(sessionmaker)
    won = await asyncio.gather(*(claim(sessionmaker, letter_id) for _ in range(8)))
    assert won.count(True) == 1
    assert await claim(sessionmaker, letter_id) is False


async def test_a_claim_that_read_the_letter_unclaimed_still_loses_to_an_earlier_commit(
    sessionmaker: async_sessionmaker,
) -> None:
    letter_id = await add_letter(sessionmaker)
    async with transaction(sessionmaker) as late:
        letters = DeadLetterRepository(late)
        assert (await letters.get(letter_id)).replayed_at is None
        assert await claim(sessionmaker, letter_id) is True  # another operator, committed meanwhile
        assert await letters.claim_replay(letter_id, utcnow()) is False


async def test_the_listing_is_newest_first_and_pending_leaves_out_replayed_letters(
    sessionmaker: async_sessionmaker,
) -> None:
    older = await add_letter(sessionmaker, "m-1")
    newer = await add_letter(sessionmaker, "m-2")
    assert await claim(sessionmaker, older)
    async with transaction(sessionmaker) as session:
        letters = DeadLetterRepository(session)
        await letters.record_replay(older, "complete", "")
    async with transaction(sessionmaker) as session:
        letters = DeadLetterRepository(session)
        assert [letter.id for letter in await letters.newest(10)] == [newer, older]
        assert [letter.id for letter in await letters.newest(10, pending_only=True)] == [newer]
        assert [letter.id for letter in await letters.newest(1)] == [newer]
        replayed = await letters.get(older)
        assert (replayed.replay_outcome, replayed.replay_detail) == ("complete", "")
