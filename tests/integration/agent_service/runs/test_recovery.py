"""Runs left ACTIVE by a crash are continued from their last checkpoint (or end as FAILED with ERROR
INTERRUPTED when they may not be); never stuck."""

from __future__ import annotations

from datetime import timedelta

import pytest

from agent_service.migrate import run_migrations
from agent_service.models import AgentEvent, AgentRun, AgentSession
from shared.llm.builtin import BuiltinProvider
from shared.protocol import utcnow
from tests.support.run_text import run_text


async def _crashed_run(db, *, seq_reserved: int = 0, continuations: int = 0, profile: str = "default",
                       checkpoint: dict | None = None, transcript: list | None = None,
                       run_state: dict | None = None) -> None:
    """The rows a process that died mid-answer left: a run ACTIVE under a lease long expired, two of
    its answer chunks in the log."""
    await run_migrations(db.engine)
    now = utcnow()
    async with db.sessionmaker.begin() as s:
        s.add(AgentSession(
            id="crashed", profile_name=profile, status="ACTIVE", user_context={"user_id": "u"},
            transcript=transcript or [{"role": "user", "content": "what is 1+1"}], run_state=run_state, last_seq=2,
            seq_reserved=seq_reserved, current_run_id="run-1", created_at=now, updated_at=now,
        ))
        await s.flush()
        s.add(AgentRun(id="run-1", session_id="crashed", status="ACTIVE", first_seq=1, started_at=now,
                       owner_id="gone", lease_expires_at=now - timedelta(seconds=1), continuations=continuations,
                       checkpoint=checkpoint))
        for seq in (1, 2):
            s.add(AgentEvent(session_id="crashed", seq=seq, run_id="run-1", type="ANSWER_CHUNK", ts=now,
                             data={"text": "partial "}))


async def test_start_up_continues_a_run_a_crash_left_active(agent_factory, db) -> None:
    """No step had ended: the run starts again from its first model call, its text so far dropped."""
    await _crashed_run(db)
    async with agent_factory() as agent:
        log = await agent.replay("crashed", 0)  # followed to its end
        resumed = log.events[2]
        assert [e.seq for e in log.events] == list(range(1, len(log.events) + 1))
        assert resumed.type.value == "RUN_RESUMED" and resumed.run_id == "run-1"
        assert resumed.data == {"checkpoint_seq": 0, "answer_chars": 0, "continuation": 1, "step": 0}
        complete = log.last
        assert complete.type.value == "COMPLETE" and complete.run_id == "run-1"
        assert "partial" not in complete.data["answer"] and run_text(log.events, "run-1") == complete.data["answer"]
        status = await agent.status("crashed")
        assert status["status"] == "COMPLETED" and status["last_seq"] == complete.seq
        # The session is usable again.
        again = await agent.execute("what is 2+2", body={"session_id": "crashed"})
        assert again.last.type.value == "COMPLETE" and again.events[0].seq == complete.seq + 1
    async with db.sessionmaker() as s:
        run = await s.get(AgentRun, "run-1")
        assert run.status == "COMPLETED" and run.error_code is None and run.continuations == 1


async def test_a_continued_run_goes_on_after_every_seq_it_may_have_shown(agent_factory, db) -> None:
    """The crashed run had reserved seqs up to 1000 and may have shown events up to there without
    writing them (only 1..2 are in the log): it goes on at 1001, a client resuming from inside the
    hole gets every event from there, and the session's next run starts after its end."""
    await _crashed_run(db, seq_reserved=1000)
    async with agent_factory() as agent:
        resumed = await agent.replay("crashed", 7)  # a client that saw seq 7 live before the crash
        assert resumed.events[0].seq == 1001 and resumed.events[0].type.value == "RUN_RESUMED"
        assert resumed.seqs == list(range(1001, 1001 + len(resumed.events)))
        assert resumed.last.type.value == "COMPLETE" and resumed.last.run_id == "run-1"
        again = await agent.execute("what is 1+1", body={"session_id": "crashed"})
        assert again.last.type.value == "COMPLETE" and again.events[0].seq == resumed.last.seq + 1
    async with db.sessionmaker() as s:
        session = await s.get(AgentSession, "crashed")
        # The completed runs gave back the seqs they did not use.
        assert session.seq_reserved == session.last_seq == again.last.seq


@pytest.mark.parametrize("why", ["continuations_spent", "continuing_off", "profile_gone"])
async def test_a_run_that_may_not_be_continued_ends_interrupted_after_every_seq_it_may_have_shown(
    agent_factory, db, why: str,
) -> None:
    """Continued twice already (the default budget), continuing switched off, or its profile no longer
    there: the run ends as before durable runs, its ERROR above every seq it had reserved."""
    await _crashed_run(db, seq_reserved=1000, continuations=2 if why == "continuations_spent" else 0,
                       profile="retired" if why == "profile_gone" else "default")
    settings = {"max_continuations": 0} if why == "continuing_off" else {}
    async with agent_factory(**settings) as agent:
        status = await agent.status("crashed")
        assert status["status"] == "FAILED" and status["last_seq"] == 1001
        resumed = await agent.replay("crashed", 7)
        assert [(e.seq, e.type.value) for e in resumed.events] == [(1001, "ERROR")]
        assert resumed.last.data["code"] == "INTERRUPTED" and resumed.last.run_id == "run-1"
        assert resumed.last.data["retryable"] is True
    async with db.sessionmaker() as s:
        run = await s.get(AgentRun, "run-1")
        assert run.status == "FAILED" and run.error_code == "INTERRUPTED" and run.ended_at is not None


async def test_the_answer_a_run_resumed_with_is_not_lost_when_it_dies_before_its_first_step(
    agent_factory, db,
) -> None:
    """A run that resumed after a question holds its answer from its claim on: continued before any
    step of its own ended, it answers the question with it, not with nothing."""
    question = {"id": "call-q", "name": "ask_user", "arguments": {"question": "Where to?"}}
    await _crashed_run(
        db, transcript=[{"role": "user", "content": "plan a trip"},
                        {"role": "assistant", "content": "", "tool_calls": [question]}],
        run_state={"pending_calls": [question], "steps": 1, "usage": {}},
        checkpoint={"v": 1, "resume": {"kind": "question", "text": "Lisbon", "approved": False}},
    )
    async with agent_factory() as agent:
        log = await agent.replay("crashed", 0)
        assert log.last.type.value == "COMPLETE" and "Lisbon" in log.last.data["answer"], log.last.data
    async with db.sessionmaker() as s:
        session = await s.get(AgentSession, "crashed")
        answered = [m for m in session.transcript if m.get("tool_call_id") == "call-q"]
        assert len(answered) == 1 and "Lisbon" in answered[0]["content"]


async def test_stopping_the_service_hands_its_runs_over_to_the_next_start(agent_factory, db) -> None:
    provider = BuiltinProvider(first_token_delay=0, chunk_delay=0.05)
    async with agent_factory(provider=provider) as agent:
        first = await agent.execute("search the docs for group commit", stop_after=1)
        session_id = first.events[0].session_id
    # The server is stopped: the run is not ended, its lease is given up and its seqs closed at its last event.
    async with db.sessionmaker() as s:
        run = await s.get(AgentRun, first.events[0].run_id)
        session = await s.get(AgentSession, session_id)
        assert run.status == "ACTIVE" and run.owner_id is None and run.lease_expires_at is None
        assert session.status == "ACTIVE" and session.seq_reserved == session.last_seq
    # A new server continues it at once, right after its last event.
    async with agent_factory() as agent:
        log = await agent.replay(session_id, 0)
        assert [e.seq for e in log.events] == list(range(1, len(log.events) + 1))
        assert [e.type.value for e in log.events].count("RUN_RESUMED") == 1
        assert log.last.type.value == "COMPLETE" and run_text(log.events, log.last.run_id) == log.last.data["answer"]


async def test_stopping_the_service_ends_its_runs_as_interrupted_when_runs_are_not_continued(agent_factory, db) -> None:
    provider = BuiltinProvider(first_token_delay=0, chunk_delay=0.05)
    async with agent_factory(provider=provider, max_continuations=0) as agent:
        first = await agent.execute("search the docs for group commit", stop_after=1)
        session_id = first.events[0].session_id
    # The server is stopped; a new one finds the run already ended, with its ERROR in the log.
    async with agent_factory(max_continuations=0) as agent:
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
