"""The transcripts a real Agent Service keeps of the sessions it completed stay within
``AGENT_SERVICE_SESSION_SNAPSHOT_MAX_BYTES`` however many sessions it completes, the newest kept."""

from __future__ import annotations

from agent_service.events.snapshots import transcript_bytes


async def test_completed_sessions_stay_within_the_byte_bound(agent_factory) -> None:
    async with agent_factory() as agent:
        snapshots = agent.app.state.agent.run_manager.snapshots  # type: ignore[attr-defined]
        first = await agent.execute("what is 2+2")
        assert first.last.type.value == "COMPLETE"
        one_session = snapshots.bytes
        assert one_session > 0
    # Room for three sessions like that one (each is a system prompt, the question and its answer).
    bound = 3 * one_session + one_session // 2
    async with agent_factory(session_snapshot_max_bytes=bound) as agent:
        manager = agent.app.state.agent.run_manager  # type: ignore[attr-defined]
        sessions = []
        for _ in range(12):
            result = await agent.execute("what is 2+2")
            assert result.last.type.value == "COMPLETE"
            sessions.append(result.events[0].session_id)
            assert manager.snapshots.bytes <= bound
        assert len(manager.snapshots) == 3
        kept = [manager.snapshots.take(s) for s in sessions]
        assert [s is not None for s in kept] == [False] * 9 + [True] * 3  # the most recently completed
        assert all(s.size == transcript_bytes(s.transcript) for s in kept[9:])
