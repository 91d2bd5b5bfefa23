"""A turn broken off by a fault of the ConversationService's own (a bug, a failed write) ends like any
other failed turn: the reply ``error`` with its text so far, ``message.error`` and ``agent.error`` to
every client, the turn done, a dead letter, and the conversation's next message answered normally.
When ending it fails too, the turn is left running for the lease sweep, which ends the reply.

The same holds for a turn taken over from a replica that gave it up, and for a dead letter's
replayed turn, whose request then answers 503 and whose reply the sweep ends.

The ConversationService is the real app on loopback (SQLite and PostgreSQL), the Agent Service
``FakeAgentService``. The fault is injected by replacing one step of the processing (or of the turn)
with one that raises, inside the real app.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from conversation_service.db.models import Turn, TurnStatus
from conversation_service.dead_letters.router import OPERATOR_KEY_HEADER
from shared.transactions import transaction
from tests.integration.conversation_service.support import connect
from tests.integration.delegation.fake_agent import ANSWER, FakeAgentService
from tests.integration.delegation.stack import AGENT_KEY, chat_service, frames_of, recv_until
from tests.integration.delegation.test_resilience import (
    assistant_messages,
    dead_letters,
    fake_stack,
    send_agent_message,
)
from tests.support.servers import serve_app

FAULT = "injected fault"
OPERATOR_KEY = "operator-key-for-tests"


async def _fault(*args, **kwargs):
    raise RuntimeError(FAULT)


def _turn_over(frame: dict) -> bool:
    # ``notice``: how the turn ended before, leaving its reply streaming.
    return frame["type"] in ("agent.error", "agent.complete", "notice")


async def _turn(stack, turn_id: str) -> Turn:
    async with transaction(stack.state.storage.sessionmaker) as session:
        return (await session.scalars(select(Turn).where(Turn.id == turn_id))).one()


async def _next_message_is_answered(stack, cid: str, ws) -> None:
    await send_agent_message(stack, cid)
    frames = await recv_until(ws, _turn_over)
    await stack.state.tasks.join()
    assert frames[-1]["type"] == "agent.complete", [f["type"] for f in frames]
    assert frames_of(frames, "message.completed")[-1]["data"]["content"] == ANSWER


@pytest.mark.parametrize("step", ["_tool_end", "_complete"])
async def test_a_fault_while_processing_the_agents_events_ends_the_reply_failed(
    database_url: str, monkeypatch: pytest.MonkeyPatch, step: str,
) -> None:
    async with fake_stack(database_url) as (_fake, stack):
        # Mid-reply (a tool's end), or at its very end with the whole answer streamed (COMPLETE).
        monkeypatch.setattr(stack.state.agent.delegation._processor, step, _fault)
        cid = await stack.conversation()
        async with await connect(stack.chat_url, cid, "alice") as ws:
            message_id = await send_agent_message(stack, cid)
            frames = await recv_until(ws, _turn_over)
            await stack.state.tasks.join()
            [reply] = await assistant_messages(stack, cid)
            turn = await _turn(stack, message_id)
            letters = await dead_letters(stack, cid)

            monkeypatch.undo()
            await _next_message_is_answered(stack, cid, ws)
        replies = await assistant_messages(stack, cid)

    shown = "" if step == "_tool_end" else ANSWER  # the text the clients had when the fault hit
    assert [f["type"] for f in frames[-2:]] == ["message.error", "agent.error"]
    error, agent_error = frames[-2]["data"], frames[-1]["data"]
    assert error["message_id"] == reply.id and error["code"] == "agent_failed" and error["retryable"] is True
    assert error["content"] == shown and error["text"]
    assert agent_error["code"] == "agent_failed" and agent_error["message_id"] == reply.id
    assert FAULT not in repr(frames)  # the cause is logged, never shown
    assert (reply.status, reply.content) == ("error", shown)
    assert turn.status == TurnStatus.DONE.value
    assert len(letters) == 1 and letters[0].error_code == "agent_failed" and letters[0].message_id == message_id
    assert letters[0].error_detail == f"RuntimeError: {FAULT}" and letters[0].payload["message"] == "what is 17*23"
    assert letters[0].attempts == 1
    assert sorted(m.status for m in replies) == ["complete", "error"]


async def test_a_fault_before_the_reply_opened_shows_a_failed_reply(
    database_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with fake_stack(database_url) as (fake, stack):
        monkeypatch.setattr(stack.state.agent.delegation, "_chat_history", _fault)
        cid = await stack.conversation()
        async with await connect(stack.chat_url, cid, "alice") as ws:
            message_id = await send_agent_message(stack, cid)
            frames = await recv_until(ws, _turn_over)
            await stack.state.tasks.join()
            [reply] = await assistant_messages(stack, cid)
            letters = await dead_letters(stack, cid)

            monkeypatch.undo()
            await _next_message_is_answered(stack, cid, ws)

    assert len(fake.execute_calls) == 1  # only the next message reached the agent
    created = [f for f in frames_of(frames, "message.created") if f["data"]["role"] == "assistant"]
    assert [f["data"]["id"] for f in created] == [reply.id]
    assert [f["type"] for f in frames[-2:]] == ["message.error", "agent.error"]
    assert frames[-2]["data"]["message_id"] == reply.id and frames[-2]["data"]["retryable"] is True
    assert reply.status == "error" and reply.agent_metadata["in_reply_to"] == message_id
    # Failed before its request was built: the letter still holds what a replay needs.
    assert [(x.error_code, x.attempts, x.payload["message"]) for x in letters] == [
        ("agent_failed", 0, "what is 17*23")]


async def test_a_turn_that_cannot_be_ended_is_left_to_the_lease_sweep(
    database_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeAgentService(api_key=AGENT_KEY)
    short_leases = {"turn_lease_s": 1.0, "turn_sweep_interval_s": 0.2}
    async with serve_app(fake.app) as agent_url, chat_service(database_url, agent_url, **short_leases) as stack:
        processor = stack.state.agent.delegation._processor
        turn_leases = stack.state.agent.delegation._leases
        # The processing fails, and so does ending the reply (as when the database is down).
        monkeypatch.setattr(processor, "_tool_end", _fault)
        monkeypatch.setattr(processor, "end", _fault)
        cid = await stack.conversation()
        async with await connect(stack.chat_url, cid, "alice") as ws:
            message_id = await send_agent_message(stack, cid)
            await fake.wait_for_calls(1)
            await stack.state.tasks.join()  # the turn's task has ended, well within the lease
            left = await _turn(stack, message_id)
            assert message_id not in turn_leases.held and message_id in turn_leases.abandoned
            # Not done: no longer renewed here, its lease runs out and this replica's sweep
            # takes it over (fault gone, as when the database is back).
            monkeypatch.undo()
            frames = await recv_until(ws, lambda f: f["type"] in ("agent.complete", "agent.error"))
        await stack.state.tasks.join()
        turn = await _turn(stack, message_id)
        [reply] = await assistant_messages(stack, cid)

    assert left.status == TurnStatus.RUNNING.value and left.takeovers == 0
    # The takeover resumed the agent's run after the last frame stored, and the reply ended.
    assert frames[-1]["type"] == "agent.complete"
    assert (reply.status, reply.content) == ("complete", ANSWER)
    assert turn.status == TurnStatus.DONE.value and turn.takeovers == 1


async def test_a_taken_over_turn_whose_processing_fails_ends_the_reply_failed(
    database_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeAgentService(api_key=AGENT_KEY)
    short_leases = {"turn_lease_s": 1.0, "turn_sweep_interval_s": 0.2}
    async with serve_app(fake.app) as agent_url, chat_service(database_url, agent_url, **short_leases) as stack:
        processor = stack.state.agent.delegation._processor
        turn_leases = stack.state.agent.delegation._leases
        # A tool's end fails, on the turn's own path and again on the takeover's, which resumes the
        # agent's stream after the tool's start (the last frame stored). Ending the reply fails
        # only on the turn's own path: that is what leaves the turn to the sweep.
        monkeypatch.setattr(processor, "_tool_end", _fault)
        cid = await stack.conversation()
        async with await connect(stack.chat_url, cid, "alice") as ws:
            with pytest.MonkeyPatch.context() as database_down:
                database_down.setattr(processor, "end", _fault)
                message_id = await send_agent_message(stack, cid)
                await fake.wait_for_calls(1)
                await stack.state.tasks.join()
                assert message_id in turn_leases.abandoned
            frames = await recv_until(ws, _turn_over)
            await stack.state.tasks.join()
            turn = await _turn(stack, message_id)
            [reply] = await assistant_messages(stack, cid)
            letters = await dead_letters(stack, cid)

            monkeypatch.undo()
            await _next_message_is_answered(stack, cid, ws)
        replies = await assistant_messages(stack, cid)

    assert len(fake.resume_calls) == 1  # the takeover resumed the run: the fault is on the resumed turn
    assert [f["type"] for f in frames[-2:]] == ["message.error", "agent.error"]
    error, agent_error = frames[-2]["data"], frames[-1]["data"]
    assert error["message_id"] == reply.id and error["code"] == "agent_failed" and error["retryable"] is True
    assert agent_error["code"] == "agent_failed" and agent_error["message_id"] == reply.id
    assert FAULT not in repr(frames)
    assert (reply.status, reply.content) == ("error", "")
    assert turn.status == TurnStatus.DONE.value and turn.takeovers == 1
    # One letter: the turn's own path could not write one. Its text is what a replay sends.
    assert [(x.error_code, x.message_id, x.error_detail, x.payload["message"]) for x in letters] == [
        ("agent_failed", message_id, f"RuntimeError: {FAULT}", "what is 17*23")]
    assert sorted(m.status for m in replies) == ["complete", "error"]


async def test_a_replayed_turn_that_cannot_be_ended_answers_503_and_is_left_to_the_lease_sweep(
    database_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeAgentService(api_key=AGENT_KEY)
    settings = {"turn_lease_s": 1.0, "turn_sweep_interval_s": 0.2, "operator_api_key": OPERATOR_KEY}
    async with serve_app(fake.app) as agent_url, chat_service(database_url, agent_url, **settings) as stack:
        delegation = stack.state.agent.delegation
        cid = await stack.conversation()
        async with await connect(stack.chat_url, cid, "alice") as ws:
            # A first try that fails before it reaches the agent: its dead letter.
            with pytest.MonkeyPatch.context() as first_try:
                first_try.setattr(delegation, "_chat_history", _fault)
                message_id = await send_agent_message(stack, cid)
                await recv_until(ws, _turn_over)
                await stack.state.tasks.join()
            [letter] = await dead_letters(stack, cid)

            # The replay fails mid-reply, and so does ending its reply (as when the database is down).
            with pytest.MonkeyPatch.context() as database_down:
                database_down.setattr(delegation._processor, "_tool_end", _fault)
                database_down.setattr(delegation._processor, "end", _fault)
                r = await stack.http.post(f"{stack.chat_url}/operator/dead-letters/{letter.id}/replay",
                                          headers={OPERATOR_KEY_HEADER: OPERATOR_KEY})
                left = await _turn(stack, message_id)
                assert message_id in delegation._leases.abandoned
            # The fault gone (the database back), the sweep takes the turn over and ends the reply.
            frames = await recv_until(ws, lambda f: f["type"] in ("agent.complete", "agent.error"))
            await stack.state.tasks.join()
        turn = await _turn(stack, message_id)
        replies = await assistant_messages(stack, cid)
        [recorded] = await dead_letters(stack, cid)

    assert r.status_code == 503, r.text
    assert r.json()["error"] == "unavailable" and "left running" in r.json()["detail"]
    assert left.status == TurnStatus.RUNNING.value and left.takeovers == 0
    assert frames[-1]["type"] == "agent.complete" and len(fake.resume_calls) == 1
    assert sorted((m.status, m.content) for m in replies) == [("complete", ANSWER), ("error", "")]
    assert turn.status == TurnStatus.DONE.value and turn.takeovers == 1
    assert recorded.replay_outcome == "left_running" and recorded.replayed_at is not None
