"""The event log's rows as written by a group commit, read back exactly (both backends)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent_service.migrate import run_migrations
from agent_service.models import AgentRun, AgentSession
from agent_service.repository import EventRepository, RunRepository, SessionRepository
from shared.db import create_engine, create_sessionmaker
from shared.protocol import EventEnvelope, EventType

_AWKWARD = ["plain", "ünïcödé 漢字 🙂", 'quote " and \\ backslash', "line\nbreak\ttab", "nul \u0000 inside", ""]


async def test_a_large_batch_of_several_sessions_round_trips_exactly(database_url: str) -> None:
    engine = create_engine(database_url)
    await run_migrations(engine)
    sessionmaker = create_sessionmaker(engine)
    start = datetime(2026, 11, 24, 13, 0, 0, 123456, tzinfo=UTC)
    sessions = [f"s{i}" for i in range(7)]
    try:
        async with sessionmaker.begin() as db:
            for sid in sessions:
                db.add(AgentSession(id=sid, profile_name="default", status="ACTIVE", user_context={"user_id": "u"},
                                    transcript=[], last_seq=0, seq_reserved=0, current_run_id=f"r-{sid}",
                                    created_at=start, updated_at=start))
        batch = [
            EventEnvelope(
                session_id=sessions[i % 7], run_id=f"r-{sessions[i % 7]}", seq=i // 7 + 1,
                type=EventType.ANSWER_CHUNK if i % 5 else EventType.TOOL_END,
                ts=start + timedelta(microseconds=i * 1001) if i % 2 else start + timedelta(seconds=i),
                data={"text": _AWKWARD[i % len(_AWKWARD)], "nested": {"n": i, "f": i / 3, "list": [1, None, True]}},
            )
            for i in range(700)
        ]
        async with sessionmaker.begin() as db:
            await EventRepository(db).insert_many(batch)
            await SessionRepository(db).bump_last_seqs({sid: 100 for sid in sessions})
        async with sessionmaker() as db:
            events = EventRepository(db)
            read = [env for sid in sessions for env in await events.after(sid, 0, 1000)]
            assert sorted(read, key=lambda e: (e.session_id, e.seq)) == sorted(batch, key=lambda e: (e.session_id, e.seq))
            assert [(await SessionRepository(db).get(sid)).last_seq for sid in sessions] == [100] * 7
    finally:
        await engine.dispose()


async def test_held_answers_the_runs_still_active_under_their_owner(database_url: str) -> None:
    engine = create_engine(database_url)
    await run_migrations(engine)
    sessionmaker = create_sessionmaker(engine)
    now = datetime.now(UTC)
    try:
        async with sessionmaker.begin() as db:
            for i, (owner, status) in enumerate([("me", "ACTIVE"), ("me", "COMPLETED"), ("other", "ACTIVE"), ("me", "ACTIVE")]):
                db.add(AgentSession(id=f"s{i}", profile_name="default", status=status, user_context={"user_id": "u"},
                                    transcript=[], last_seq=0, seq_reserved=0, current_run_id=f"r{i}",
                                    created_at=now, updated_at=now))
                await db.flush()
                db.add(AgentRun(id=f"r{i}", session_id=f"s{i}", status=status, first_seq=1, started_at=now, owner_id=owner))
        async with sessionmaker() as db:
            runs = RunRepository(db)
            assert await runs.held({"r0", "r1", "r2", "r3", "r-unknown"}, "me") == {"r0", "r3"}
            assert await runs.held({"r2"}, "me") == set()
    finally:
        await engine.dispose()
