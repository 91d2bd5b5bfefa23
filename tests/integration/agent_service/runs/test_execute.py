"""Execute over a real uvicorn server on loopback, on SQLite and PostgreSQL."""

from __future__ import annotations

from shared.llm.builtin import BuiltinProvider


def _contiguous(seqs: list[int], start: int = 1) -> bool:
    return seqs == list(range(start, start + len(seqs)))


async def test_calculator_run_streams_tools_and_answer(agent, db) -> None:
    result = await agent.execute("what is 17*23")
    assert result.status == 200
    assert result.retry == agent.settings.sse_retry_ms
    types = [e.type.value for e in result.events]
    assert types[-1] == "COMPLETE"
    assert _contiguous(result.seqs)

    start = result.of_type("TOOL_START")[0]
    end = result.of_type("TOOL_END")[0]
    assert start.data["tool"] == "calculator" and end.data["ok"] is True
    assert end.data["call_id"] == start.data["call_id"] and end.data["duration_ms"] >= 0
    assert types.index("TOOL_START") < types.index("TOOL_END") < types.index("ANSWER_CHUNK")

    complete = result.last
    assert "391" in complete.data["answer"]
    assert "".join(e.data["text"] for e in result.of_type("ANSWER_CHUNK")) == complete.data["answer"]
    assert complete.data["usage"]["llm_calls"] == 2 and complete.data["usage"]["tool_calls"] == 1
    assert complete.data["usage"]["total_tokens"] > 0
    session_id = complete.session_id
    assert result.headers["x-session-id"] == session_id
    assert {e.run_id for e in result.events} == {result.headers["x-run-id"]}

    status = await agent.status(session_id)
    assert status["status"] == "COMPLETED" and status["last_seq"] == complete.seq
    assert status["pending_question"] is None
    # Every streamed event is in the durable log, identical.
    assert await db.events(session_id) == len(result.events)
    replay = await agent.replay(session_id, 0)
    assert [e.model_dump() for e in replay.events] == [e.model_dump() for e in result.events]


async def test_second_message_continues_the_session(agent, db) -> None:
    first = await agent.execute("what is 17*23")
    session_id = first.last.session_id
    second = await agent.execute("what is 2+2", body={"session_id": session_id})
    assert second.last.type.value == "COMPLETE" and "4" in second.last.data["answer"]
    assert _contiguous(first.seqs + second.seqs)
    assert await db.runs(session_id) == 2


async def test_drop_and_resume_with_last_event_id(agent_factory) -> None:
    # A paced model so the run is still going when the client drops.
    provider = BuiltinProvider(first_token_delay=0, chunk_delay=0.01)
    async with agent_factory(provider=provider) as agent:
        first = await agent.execute("search the docs for group commit", stop_after=3)
        # Dropped once 3 events are in; events queued together come in one write, so a read may
        # hold a few more (the run's first events are all queued before its stream's first write).
        assert len(first.events) >= 3 and first.last.type.value != "COMPLETE"
        session_id = first.events[0].session_id
        resumed = await agent.replay(session_id, first.events[-1].seq)
        assert resumed.status == 200
        seqs = first.seqs + resumed.seqs
        assert _contiguous(seqs), seqs  # no gap, no duplicate
        assert resumed.last.type.value == "COMPLETE"
        answer = "".join(e.data["text"] for e in first.events + resumed.events if e.type.value == "ANSWER_CHUNK")
        assert answer == resumed.last.data["answer"]
        assert (await agent.status(session_id))["status"] == "COMPLETED"


async def test_concurrent_execute_is_409(agent_factory, db) -> None:
    provider = BuiltinProvider(first_token_delay=0, chunk_delay=0.02)
    async with agent_factory(provider=provider) as agent:
        first = await agent.execute("search the docs for group commit", stop_after=1)
        session_id = first.events[0].session_id
        second = await agent.execute("what is 1+1", body={"session_id": session_id})
        assert second.status == 409
        assert second.body["error"] == "run_in_progress"
        assert second.body["detail"]["run_id"] == first.events[0].run_id
        assert await db.runs(session_id) == 1
        rest = await agent.replay(session_id, first.events[-1].seq)
        assert rest.last.type.value == "COMPLETE"


async def test_idempotent_retry_joins_the_run(agent_factory, db) -> None:
    provider = BuiltinProvider(first_token_delay=0, chunk_delay=0.01)
    async with agent_factory(provider=provider) as agent:
        headers = agent.headers(**{"Idempotency-Key": "retry-key-1"})
        first = await agent.execute("search the docs for group commit", headers=headers, stop_after=2)
        session_id = first.events[0].session_id
        retry = await agent.execute("search the docs for group commit", headers=headers)
        assert retry.status == 200
        assert retry.events[0].seq == 1, "the joined stream replays the run from its start"
        assert {e.run_id for e in retry.events} == {first.events[0].run_id}
        assert retry.last.type.value == "COMPLETE"
        assert _contiguous(retry.seqs)
        assert await db.runs(session_id) == 1
        assert await db.sessions() == 1
        # After the run ended, a retry still answers with that run's events, not a new run.
        again = await agent.execute("search the docs for group commit", headers=headers)
        assert [e.seq for e in again.events] == retry.seqs
        assert await db.runs(session_id) == 1


async def test_idempotency_key_of_another_session_is_409(agent) -> None:
    headers = agent.headers(**{"Idempotency-Key": "k-2"})
    first = await agent.execute("what is 1+1", headers=headers)
    other = await agent.execute("what is 2+2")
    clash = await agent.execute("what is 3+3", headers=headers, body={"session_id": other.last.session_id})
    assert first.status == 200 and clash.status == 409
    assert clash.body["error"] == "idempotency_key_conflict"


async def test_cancel_a_running_run(agent_factory, db) -> None:
    # Paced so the run is surely still going when the cancel arrives (cancel waits for the run's
    # end, so the pace does not slow the test down).
    provider = BuiltinProvider(first_token_delay=0, chunk_delay=0.5)
    async with agent_factory(provider=provider) as agent:
        first = await agent.execute("search the docs for group commit", stop_after=1)
        session_id = first.events[0].session_id
        resp = await agent.http.post(f"/api/v1/agent/sessions/{session_id}/cancel", headers=agent.headers())
        assert resp.status_code == 200, resp.text
        assert resp.json()["status"] == "CANCELLED"
        rest = await agent.replay(session_id, first.events[-1].seq)
        assert rest.last.type.value == "ERROR"
        assert rest.last.data == {"code": "CANCELLED", "message": "the run was cancelled", "retryable": False}
        assert _contiguous(first.seqs + rest.seqs)
        again = await agent.http.post(f"/api/v1/agent/sessions/{session_id}/cancel", headers=agent.headers())
        assert again.status_code == 409 and again.json()["error"] == "nothing_to_cancel"


async def test_heartbeat_comments_while_the_model_thinks(agent_factory) -> None:
    provider = BuiltinProvider(first_token_delay=1.0, chunk_delay=0)
    async with agent_factory(provider=provider, heartbeat_seconds=0.05) as agent:
        result = await agent.execute("what is 17*23")
        assert result.comments >= 1
        assert result.last.type.value == "COMPLETE"


async def test_metrics_count_runs_and_events(agent) -> None:
    await agent.execute("what is 17*23")
    text = (await agent.http.get("/metrics")).text
    assert "agent_runs_started_total 1.0" in text
    assert "agent_runs_completed_total 1.0" in text
    assert 'agent_events_total{type="TOOL_END"} 1.0' in text
    assert 'agent_tool_latency_seconds_count{tool="calculator"} 1.0' in text
    assert "agent_llm_time_to_first_token_seconds_count 2.0" in text
    assert "agent_active_runs 0.0" in text
