"""conversation_agent_sessions on SQLite and PostgreSQL, migrated to head: correlation lookups,
conditional status changes, and the one-open-session-per-conversation guarantee under load."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import async_sessionmaker

from conversation_service.agent_sessions.errors import AgentSessionConflict, UnknownConversation
from conversation_service.agent_sessions.repository import AgentSessionRepository
from conversation_service.agent_sessions.service import AgentSessionService
from conversation_service.db.migrate import upgrade
from conversation_service.db.models import AgentSessionStatus, Conversation, ConversationAgentSession, utcnow
from shared.db import create_engine, create_sessionmaker
from shared.transactions import transaction

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
    async with transaction(sessionmaker) as session:
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
    async with transaction(sessionmaker) as session:
        repo = AgentSessionRepository(session)
        row = await repo.create(conversation_id, profile_name="research")
        assert (row.status, row.agent_session_id, row.profile_name) == ("ACTIVE", None, "research")
        assert row.created_at == row.last_interaction_at
        await repo.set_agent_session_id(row.id, "as-123")
        row_id = row.id

    async with sessionmaker() as session:
        repo = AgentSessionRepository(session)
        by_id = await session.get(ConversationAgentSession, row_id)
        by_agent = await repo.get_by_agent_session_id("as-123")
        open_one = await repo.get_open_for_conversation(conversation_id)
        assert by_id is not None and by_agent is not None and open_one is not None
        assert by_id.id == by_agent.id == open_one.id == row_id
        assert by_id.agent_session_id == "as-123"
        assert await session.get(ConversationAgentSession, "missing") is None
        assert await repo.get_by_agent_session_id("as-unknown") is None


async def test_second_open_session_is_a_conflict_and_the_transaction_survives(sessionmaker) -> None:
    conversation_id = await _conversation(sessionmaker)
    async with transaction(sessionmaker) as session:
        repo = AgentSessionRepository(session)
        first = await repo.create(conversation_id)
        with pytest.raises(AgentSessionConflict) as caught:
            await repo.create(conversation_id, status=S.AWAITING_USER)
        assert caught.value.status_code == 409 and caught.value.error == "agent_session_conflict"
        # Only the failed insert was rolled back: the first row is still there and commits.
        assert (await repo.get_open_for_conversation(conversation_id)).id == first.id  # type: ignore[union-attr]

    async with transaction(sessionmaker) as session:
        repo = AgentSessionRepository(session)
        assert await repo.update_status(first.id, S.COMPLETED) is not None
        # Finished sessions do not count: the conversation may open a new one.
        second = await repo.create(conversation_id)
        assert second.id != first.id
        latest = await repo.get_latest_for_conversation(conversation_id)
        assert latest is not None and latest.id == second.id
    assert await _count(sessionmaker, conversation_id) == 2


async def test_unknown_conversation_and_duplicate_agent_session_id(sessionmaker) -> None:
    a = await _conversation(sessionmaker)
    b = await _conversation(sessionmaker)
    async with transaction(sessionmaker) as session:
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
        assert await repo.set_agent_session_id("missing", "as-d") is None


async def test_status_changes(sessionmaker) -> None:
    conversation_id = await _conversation(sessionmaker)
    async with transaction(sessionmaker) as session:
        service = AgentSessionService(session)
        repo = service.repository
        row, created = await service.get_or_create_open(conversation_id, profile_name="default")
        assert created
        t0 = row.last_interaction_at
        await repo.set_pending_question(row.id, "q1")
        waiting = await repo.update_status(row.id, S.AWAITING_USER, now=t0 + timedelta(seconds=5))
        assert waiting is not None
        assert (waiting.status, waiting.last_interaction_at) == ("AWAITING_USER", t0 + timedelta(seconds=5))
        assert waiting.pending_question_id == "q1"
        again, created = await service.get_or_create_open(conversation_id)
        assert (again.id, created) == (row.id, False)
        active = await repo.update_status(row.id, S.ACTIVE, expected=[S.AWAITING_USER])
        assert active is not None and active.status == "ACTIVE"
        # Only rows in an expected status change.
        assert await repo.update_status(row.id, S.COMPLETED, expected=[S.AWAITING_USER]) is None
        done = await repo.update_status(row.id, S.COMPLETED)
        assert done is not None and done.status == "COMPLETED" and done.pending_question_id is None
        # A finished session never reopens (open statuses are the default expectation).
        assert await repo.update_status(row.id, S.ACTIVE) is None
        assert await repo.update_status("missing", S.FAILED) is None
        assert await repo.get_open_for_conversation(conversation_id) is None

    async with sessionmaker() as session:
        stored = await session.get(ConversationAgentSession, row.id)
        assert stored is not None and stored.status == "COMPLETED"


async def test_a_turn_start_reopens_and_clears_the_question_in_one_update(sessionmaker) -> None:
    conversation_id = await _conversation(sessionmaker)
    async with transaction(sessionmaker) as session:
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


async def test_touch_and_event_seq(sessionmaker) -> None:
    conversation_id = await _conversation(sessionmaker)
    now = utcnow()
    async with transaction(sessionmaker) as session:
        repo = AgentSessionRepository(session)
        row = await repo.create(conversation_id, now=now - timedelta(minutes=10))
        touched = await repo.touch(row.id, now=now)
        assert touched is not None and touched.last_interaction_at == now
        assert await repo.touch("missing") is None

        assert await repo.advance_event_seq(row.id, 5)
        assert not await repo.advance_event_seq(row.id, 3)
        assert await repo.advance_event_seq(row.id, 6)

    async with sessionmaker() as session:
        stored = await session.get(ConversationAgentSession, row.id)
        assert stored is not None and (stored.status, stored.last_event_seq) == ("ACTIVE", 6)


async def test_fifty_concurrent_creations_make_exactly_one_session(sessionmaker) -> None:
    conversation_id = await _conversation(sessionmaker)
    start = asyncio.Event()

    async def attempt() -> str:
        await start.wait()
        async with transaction(sessionmaker) as session:
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
        async with transaction(sessionmaker) as session:
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
