"""conversation_agent_sessions on SQLite and PostgreSQL, migrated to head: correlation lookups,
status rules, stale listing, and the one-open-session-per-conversation guarantee under load."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import async_sessionmaker

from conversation_service.agent_sessions import (
    AgentSessionConflict,
    AgentSessionNotFound,
    AgentSessionRepository,
    AgentSessionService,
    InvalidAgentSessionTransition,
    UnknownConversation,
)
from conversation_service.db.migrate import upgrade
from conversation_service.db.models import AgentSessionStatus, Conversation, ConversationAgentSession, utcnow
from conversation_service.db.repository import unit_of_work
from shared.db import create_engine, create_sessionmaker

S = AgentSessionStatus


@pytest.fixture
async def sessionmaker(database_url: str) -> AsyncIterator[async_sessionmaker]:
    engine = create_engine(database_url, pool_size=10)
    try:
        await upgrade(engine)
        yield create_sessionmaker(engine)
    finally:
        await engine.dispose()


async def _conversation(sessionmaker: async_sessionmaker, owner: str = "u1") -> str:
    async with unit_of_work(sessionmaker) as session:
        conversation = Conversation(owner_id=owner, org_id="o1", title="t")
        session.add(conversation)
        await session.flush()
        return conversation.id


async def _count(sessionmaker: async_sessionmaker, conversation_id: str) -> int:
    async with sessionmaker() as session:
        return await session.scalar(
            select(func.count())
            .select_from(ConversationAgentSession)
            .where(ConversationAgentSession.conversation_id == conversation_id)
        )


async def test_create_and_look_up_by_either_id(sessionmaker: async_sessionmaker) -> None:
    conversation_id = await _conversation(sessionmaker)
    async with unit_of_work(sessionmaker) as session:
        repo = AgentSessionRepository(session)
        row = await repo.create(conversation_id, profile_name="research")
        assert (row.status, row.agent_session_id, row.profile_name) == ("ACTIVE", None, "research")
        assert row.created_at == row.last_interaction_at
        await repo.set_agent_session_id(row.id, "as-123")
        row_id = row.id

    async with sessionmaker() as session:
        repo = AgentSessionRepository(session)
        by_id = await repo.get_by_id(row_id)
        by_agent = await repo.get_by_agent_session_id("as-123")
        open_one = await repo.get_open_for_conversation(conversation_id)
        assert by_id is not None and by_agent is not None and open_one is not None
        assert by_id.id == by_agent.id == open_one.id == row_id
        assert by_id.agent_session_id == "as-123"
        assert await repo.get_by_id("missing") is None
        assert await repo.get_by_agent_session_id("as-unknown") is None


async def test_second_open_session_is_a_conflict_and_the_transaction_survives(sessionmaker) -> None:
    conversation_id = await _conversation(sessionmaker)
    async with unit_of_work(sessionmaker) as session:
        repo = AgentSessionRepository(session)
        first = await repo.create(conversation_id)
        with pytest.raises(AgentSessionConflict) as caught:
            await repo.create(conversation_id, status=S.AWAITING_USER)
        assert caught.value.status_code == 409 and caught.value.error == "agent_session_conflict"
        # Only the failed insert was rolled back: the first row is still there and commits.
        assert (await repo.get_open_for_conversation(conversation_id)).id == first.id  # type: ignore[union-attr]

    async with unit_of_work(sessionmaker) as session:
        service = AgentSessionService(session)
        await service.transition(first.id, S.COMPLETED)
        # Finished sessions do not count: the conversation may open a new one.
        second = await service.repository.create(conversation_id)
        assert second.id != first.id
        latest = await service.repository.get_latest_for_conversation(conversation_id)
        assert latest is not None and latest.id == second.id
    assert await _count(sessionmaker, conversation_id) == 2


async def test_unknown_conversation_and_duplicate_agent_session_id(sessionmaker) -> None:
    a = await _conversation(sessionmaker)
    b = await _conversation(sessionmaker)
    async with unit_of_work(sessionmaker) as session:
        repo = AgentSessionRepository(session)
        with pytest.raises(UnknownConversation):
            await repo.create("00000000-0000-0000-0000-000000000000")
        await repo.create(a, agent_session_id="as-shared")
        with pytest.raises(AgentSessionConflict, match="already mapped"):
            await repo.create(b, agent_session_id="as-shared")
        other = await repo.create(b)
        with pytest.raises(AgentSessionConflict, match="already mapped"):
            await repo.set_agent_session_id(other.id, "as-shared")
        # Once set, the correlation does not change.
        assert await repo.set_agent_session_id(other.id, "as-b") is not None
        assert await repo.set_agent_session_id(other.id, "as-b") is not None
        assert await repo.set_agent_session_id(other.id, "as-c") is None
        service = AgentSessionService(session)
        with pytest.raises(AgentSessionConflict):
            await service.record_agent_session_id(other.id, "as-c")
        with pytest.raises(AgentSessionNotFound):
            await service.record_agent_session_id("missing", "as-d")


async def test_status_transitions(sessionmaker) -> None:
    conversation_id = await _conversation(sessionmaker)
    async with unit_of_work(sessionmaker) as session:
        service = AgentSessionService(session)
        row, created = await service.get_or_create_open(conversation_id, profile_name="default")
        assert created
        t0 = row.last_interaction_at
        await service.repository.set_pending_question(row.id, "q1")
        waiting = await service.transition(row.id, S.AWAITING_USER, now=t0 + timedelta(seconds=5))
        assert (waiting.status, waiting.last_interaction_at) == ("AWAITING_USER", t0 + timedelta(seconds=5))
        assert waiting.pending_question_id == "q1"
        # Repeating the current status is harmless.
        assert (await service.transition(row.id, S.AWAITING_USER)).status == "AWAITING_USER"
        again, created = await service.get_or_create_open(conversation_id)
        assert (again.id, created) == (row.id, False)
        assert (await service.transition(row.id, S.ACTIVE)).status == "ACTIVE"
        done = await service.transition(row.id, S.COMPLETED)
        assert done.status == "COMPLETED" and done.pending_question_id is None
        with pytest.raises(InvalidAgentSessionTransition):
            await service.transition(row.id, S.ACTIVE)
        with pytest.raises(InvalidAgentSessionTransition):
            await service.transition(row.id, S.FAILED)
        with pytest.raises(AgentSessionNotFound):
            await service.transition("missing", S.FAILED)
        assert await service.open_for(conversation_id) is None
        # The repository's own guard: only rows in an expected status change.
        assert await service.repository.update_status(row.id, S.FAILED) is None

    async with sessionmaker() as session:
        stored = await AgentSessionRepository(session).get_by_id(row.id)
        assert stored is not None and stored.status == "COMPLETED"


async def test_a_turn_start_reopens_and_clears_the_question_in_one_update(sessionmaker) -> None:
    conversation_id = await _conversation(sessionmaker)
    async with unit_of_work(sessionmaker) as session:
        service = AgentSessionService(session)
        row, _ = await service.get_or_create_open(conversation_id, profile_name="default")
        repository = service.repository
        await repository.set_pending_question(row.id, "q1")
        assert (await repository.update_status(row.id, S.AWAITING_USER)).pending_question_id == "q1"
        reopened = await repository.update_status(
            row.id, S.ACTIVE, expected=[S.ACTIVE, S.AWAITING_USER], clear_pending_question=True
        )
        assert (reopened.status, reopened.pending_question_id) == ("ACTIVE", None)
        # Without the flag an open status keeps the question.
        await repository.set_pending_question(row.id, "q2")
        assert (await repository.update_status(row.id, S.AWAITING_USER)).pending_question_id == "q2"


async def test_touch_event_seq_and_stale_sessions(sessionmaker) -> None:
    ids = [await _conversation(sessionmaker) for _ in range(4)]
    now = utcnow()
    async with unit_of_work(sessionmaker) as session:
        service = AgentSessionService(session)
        repo = service.repository
        rows = [await repo.create(cid, now=now - timedelta(minutes=10 - i)) for i, cid in enumerate(ids)]
        await service.transition(rows[1].id, S.AWAITING_USER, now=now - timedelta(minutes=9))
        await service.transition(rows[2].id, S.COMPLETED, now=now - timedelta(minutes=8))
        touched = await service.touch(rows[3].id, now=now)
        assert touched.last_interaction_at == now
        with pytest.raises(AgentSessionNotFound):
            await service.touch("missing")

        assert await repo.advance_event_seq(rows[0].id, 5)
        assert not await repo.advance_event_seq(rows[0].id, 3)
        assert await repo.advance_event_seq(rows[0].id, 6)

        cutoff = now - timedelta(minutes=5)
        stale = await repo.list_stale(cutoff, limit=10)
        # Open sessions idle since before the cutoff, least recently used first; finished ones never.
        assert [r.id for r in stale] == [rows[0].id, rows[1].id]
        assert [r.id for r in await repo.list_stale(cutoff, limit=1)] == [rows[0].id]
        assert [r.id for r in await repo.list_stale(cutoff, statuses=[S.AWAITING_USER])] == [rows[1].id]

        abandoned = await service.abandon_stale(cutoff)
        assert sorted(r.id for r in abandoned) == sorted([rows[0].id, rows[1].id])
        assert await repo.list_stale(cutoff) == []

    async with sessionmaker() as session:
        repo = AgentSessionRepository(session)
        first = await repo.get_by_id(rows[0].id)
        assert first is not None and (first.status, first.last_event_seq) == ("ABANDONED", 6)
        last = await repo.get_by_id(rows[3].id)
        assert last is not None and last.status == "ACTIVE"


async def test_fifty_concurrent_creations_make_exactly_one_session(sessionmaker) -> None:
    conversation_id = await _conversation(sessionmaker)
    start = asyncio.Event()

    async def attempt() -> str:
        await start.wait()
        async with unit_of_work(sessionmaker) as session:
            row = await AgentSessionRepository(session).create(conversation_id)
            return row.id

    tasks = [asyncio.create_task(attempt()) for _ in range(50)]
    start.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)

    created = [r for r in results if isinstance(r, str)]
    conflicts = [r for r in results if isinstance(r, AgentSessionConflict)]
    assert not [r for r in results if isinstance(r, IntegrityError)]
    assert len(created) == 1 and len(conflicts) == 49, [type(r).__name__ for r in results]
    assert await _count(sessionmaker, conversation_id) == 1


async def test_fifty_concurrent_get_or_create_share_one_session(sessionmaker) -> None:
    conversation_id = await _conversation(sessionmaker)
    start = asyncio.Event()

    async def attempt() -> tuple[str, bool]:
        await start.wait()
        async with unit_of_work(sessionmaker) as session:
            row, created = await AgentSessionService(session).get_or_create_open(conversation_id)
            return row.id, created

    tasks = [asyncio.create_task(attempt()) for _ in range(50)]
    start.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)

    unexpected = [
        r for r in results if isinstance(r, BaseException) and not isinstance(r, AgentSessionConflict)
    ]
    assert not unexpected, unexpected
    joined = [r for r in results if isinstance(r, tuple)]
    assert sum(1 for _, created in joined if created) == 1
    assert len({row_id for row_id, _ in joined}) == 1
    assert await _count(sessionmaker, conversation_id) == 1
