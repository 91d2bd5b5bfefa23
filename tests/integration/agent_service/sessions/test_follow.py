"""A replica that does not run a session follows its log until the run ends."""

from __future__ import annotations

import asyncio

from agent_service.models import AgentEvent, AgentRun, AgentSession
from agent_service.repository import SessionRepository
from shared.protocol import utcnow


async def test_replay_follows_a_run_of_another_process(agent_factory, db) -> None:
    async with agent_factory(replay_poll_seconds=0.02) as agent:
        # Another replica runs this session: its events reach the shared database only.
        now = utcnow()
        async with db.sessionmaker.begin() as s:
            s.add(AgentSession(id="elsewhere", profile_name="default", status="ACTIVE", user_context={"user_id": "u"},
                               transcript=[], last_seq=1, current_run_id="r-x", created_at=now, updated_at=now))
            await s.flush()
            s.add(AgentRun(id="r-x", session_id="elsewhere", status="ACTIVE", first_seq=1, started_at=now))
            s.add(AgentEvent(session_id="elsewhere", seq=1, run_id="r-x", type="ANSWER_CHUNK", ts=now,
                             data={"text": "a"}))

        got_first = asyncio.Event()
        follower = asyncio.create_task(agent.replay("elsewhere", 0, on_event=lambda _: got_first.set()))
        # Once the follower has seq 1 it is polling; then the other replica writes the rest.
        await asyncio.wait_for(got_first.wait(), 10)
        async with db.sessionmaker.begin() as s:
            s.add(AgentEvent(session_id="elsewhere", seq=2, run_id="r-x", type="ANSWER_CHUNK", ts=now,
                             data={"text": "b"}))
            s.add(AgentEvent(session_id="elsewhere", seq=3, run_id="r-x", type="COMPLETE", ts=now,
                             data={"answer": "ab"}))
            await SessionRepository(s).update("elsewhere", status="COMPLETED", last_seq=3)
        result = await asyncio.wait_for(follower, 10)
        assert [e.seq for e in result.events] == [1, 2, 3]
        assert result.last.type.value == "COMPLETE"
