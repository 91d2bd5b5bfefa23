"""Runs left ACTIVE by a crash end as FAILED with ERROR INTERRUPTED; never stuck."""

from __future__ import annotations

from agent_service.migrate import run_migrations
from agent_service.models import AgentEvent, AgentRun, AgentSession
from shared.llm.builtin import BuiltinProvider
from shared.protocol import utcnow


async def test_start_up_ends_runs_a_crash_left_active(agent_factory, db) -> None:
    await run_migrations(db.engine)
    now = utcnow()
    async with db.sessionmaker.begin() as s:
        s.add(AgentSession(
            id="crashed", profile_name="default", status="ACTIVE", user_context={"user_id": "u"},
            transcript=[{"role": "user", "content": "what is 1+1"}], last_seq=2, current_run_id="run-1",
            created_at=now, updated_at=now,
        ))
        await s.flush()
        s.add(AgentRun(id="run-1", session_id="crashed", status="ACTIVE", first_seq=1, started_at=now))
        for seq in (1, 2):
            s.add(AgentEvent(session_id="crashed", seq=seq, run_id="run-1", type="ANSWER_CHUNK", ts=now,
                             data={"text": "partial "}))

    async with agent_factory() as agent:
        status = await agent.status("crashed")
        assert status["status"] == "FAILED" and status["last_seq"] == 3
        log = await agent.replay("crashed", 0)
        assert [e.seq for e in log.events] == [1, 2, 3]
        error = log.last
        assert error.type.value == "ERROR" and error.run_id == "run-1"
        assert error.data["code"] == "INTERRUPTED" and error.data["retryable"] is True
        # The session is usable again.
        again = await agent.execute("what is 1+1", body={"session_id": "crashed"})
        assert again.last.type.value == "COMPLETE" and again.events[0].seq == 4
    async with db.sessionmaker() as s:
        run = await s.get(AgentRun, "run-1")
        assert run.status == "FAILED" and run.error_code == "INTERRUPTED" and run.ended_at is not None


async def test_a_crashed_runs_end_goes_after_every_seq_it_may_have_shown(agent_factory, db) -> None:
    """The crashed run had reserved seqs up to 1000 and may have shown events up to there without
    writing them (only 1..2 are in the log): its ERROR is 1001, a client resuming from inside the
    hole gets it, and the session's next run starts after it."""
    await run_migrations(db.engine)
    now = utcnow()
    async with db.sessionmaker.begin() as s:
        s.add(AgentSession(
            id="crashed", profile_name="default", status="ACTIVE", user_context={"user_id": "u"},
            transcript=[{"role": "user", "content": "what is 1+1"}], last_seq=2, seq_reserved=1000,
            current_run_id="run-1", created_at=now, updated_at=now,
        ))
        await s.flush()
        s.add(AgentRun(id="run-1", session_id="crashed", status="ACTIVE", first_seq=1, started_at=now))
        for seq in (1, 2):
            s.add(AgentEvent(session_id="crashed", seq=seq, run_id="run-1", type="ANSWER_CHUNK", ts=now,
                             data={"text": "partial "}))

    async with agent_factory() as agent:
        status = await agent.status("crashed")
        assert status["status"] == "FAILED" and status["last_seq"] == 1001
        resumed = await agent.replay("crashed", 7)  # a client that saw seq 7 live before the crash
        assert [(e.seq, e.type.value) for e in resumed.events] == [(1001, "ERROR")]
        assert resumed.last.data["code"] == "INTERRUPTED" and resumed.last.run_id == "run-1"
        again = await agent.execute("what is 1+1", body={"session_id": "crashed"})
        assert again.last.type.value == "COMPLETE" and again.events[0].seq == 1002
    async with db.sessionmaker() as s:
        session = await s.get(AgentSession, "crashed")
        # The completed run gave back the seqs it did not use.
        assert session.seq_reserved == session.last_seq == again.last.seq


async def test_stopping_the_service_ends_its_runs_as_interrupted(agent_factory, db) -> None:
    provider = BuiltinProvider(first_token_delay=0, chunk_delay=0.05)
    async with agent_factory(provider=provider) as agent:
        first = await agent.execute("search the docs for group commit", stop_after=1)
        session_id = first.events[0].session_id
    # The server is stopped; a new one finds the run already ended, with its ERROR in the log.
    async with agent_factory() as agent:
        status = await agent.status(session_id)
        assert status["status"] == "FAILED"
        log = await agent.replay(session_id, 0)
        assert [e.seq for e in log.events] == list(range(1, len(log.events) + 1))
        assert log.last.type.value == "ERROR" and log.last.data["code"] == "INTERRUPTED"
        assert log.last.data["retryable"] is True


class BrokenProvider:
    """A model client with a bug: it fails with a non-LLM exception in the middle of a stream."""

    name = "broken"

    async def stream(self, messages, *, tools=(), options=None):
        from shared.llm.base import TextDelta

        yield TextDelta("partial ")
        raise RuntimeError("bug in the client")

    async def aclose(self) -> None:
        return None


async def test_unexpected_exception_fails_the_run_as_internal(agent_factory) -> None:
    async with agent_factory(provider=BrokenProvider()) as agent:
        result = await agent.execute("hello")
        assert [e.type.value for e in result.events] == ["ANSWER_CHUNK", "ERROR"]
        assert result.last.data == {"code": "INTERNAL", "message": "internal error in the agent service",
                                    "retryable": False}
        status = await agent.status(result.last.session_id)
        assert status["status"] == "FAILED"
        metrics = (await agent.http.get("/metrics")).text
        assert 'agent_runs_failed_total{code="INTERNAL"} 1.0' in metrics
