"""Story 7 against a controllable Agent Service: error categories, the circuit breaker, and a stream
cut mid-run.

The ConversationService is the real app on loopback (SQLite and PostgreSQL); the Agent Service is
``FakeAgentService``, a small real Starlette app that answers each execute as the test says and
counts the calls. Retry and reconnect delays are shrunk to milliseconds and the breaker's open
period to half a second; the schedules themselves are tested in the SDK's and breaker's unit tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import select

from conversation_service.agent_client import (
    AgentBadRequestError,
    AgentRequestTimeoutError,
)
from conversation_service.db.models import DeadLetter, Message
from conversation_service.settings.routing import FALLBACK_NOTICE
from shared.breaker import BreakerState
from shared.transactions import transaction
from tests.integration.conversation_service.support import connect
from tests.integration.delegation.fake_agent import (
    ANSWER,
    ANSWER_CHUNKS,
    CUT,
    ERROR_STATUSES,
    HOLD,
    OK,
    FakeAgentService,
)
from tests.integration.delegation.stack import AGENT_KEY, Stack, chat_service, frames_of, recv_until
from tests.support.servers import serve_app

OPEN_S = 0.5
AGENT_COMMAND = "/agent what is 17*23"


@asynccontextmanager
async def fake_stack(database_url: str, **delegation) -> AsyncIterator[tuple[FakeAgentService, Stack]]:
    fake = FakeAgentService(api_key=AGENT_KEY)
    async with serve_app(fake.app) as agent_url:
        settings = {"agent_breaker_open_s": OPEN_S, **delegation}
        async with chat_service(database_url, agent_url, delegation=settings) as stack:
            yield fake, stack


async def send_agent_message(stack: Stack, cid: str, content: str = AGENT_COMMAND) -> str:
    r = await stack.send(cid, content)
    assert r.status_code == 202, r.text
    assert r.json()["route"]["target"] == "agent", r.json()
    return r.json()["message_id"]


def ends_turn(frame: dict) -> bool:
    return frame["type"] in ("message.completed", "agent.error", "agent.complete")


async def assistant_messages(stack: Stack, cid: str) -> list[Message]:
    async with transaction(stack.state.storage.sessionmaker) as session:
        return list((await session.scalars(
            select(Message).where(Message.conversation_id == cid, Message.role == "assistant")
        )).all())


async def dead_letters(stack: Stack, cid: str) -> list[DeadLetter]:
    async with transaction(stack.state.storage.sessionmaker) as session:
        return list((await session.scalars(select(DeadLetter).where(DeadLetter.conversation_id == cid))).all())


def frames_text(frames: list[dict]) -> str:
    return repr([f["data"] for f in frames])


async def test_503_is_retried_three_times_with_one_key_then_falls_back(database_url: str) -> None:
    async with fake_stack(database_url) as (fake, stack):
        fake.default_mode = "503"
        cid = await stack.conversation()
        async with await connect(stack.chat_url, cid, "alice") as ws:
            message_id = await send_agent_message(stack, cid)
            frames = await recv_until(ws, lambda f: f["type"] == "message.completed")
        await stack.state.tasks.join()
        replies = await assistant_messages(stack, cid)
        letters = await dead_letters(stack, cid)

    # The first try and three retries, every one with the same key: a retry joins, never duplicates.
    assert len(fake.execute_calls) == 4
    assert {c.idempotency_key for c in fake.execute_calls} == {f"msg-{message_id}"}
    assert all(c.message == "what is 17*23" for c in fake.execute_calls)
    notices = frames_of(frames, "notice")
    assert [n["data"]["text"] for n in notices] == [FALLBACK_NOTICE]
    assert not [f for f in frames if f["type"].startswith("agent.")]
    # The direct LLM answered instead.
    assert len(replies) == 1 and replies[0].status == "complete" and replies[0].content
    assert replies[0].agent_metadata["path"] == "direct_llm"
    assert replies[0].agent_metadata["fallback_reason"] == "AgentUnavailableError"
    assert frames[-1]["data"]["message_id"] == replies[0].id
    assert len(letters) == 1
    assert letters[0].error_code == "AgentUnavailableError" and letters[0].attempts == 4
    assert letters[0].message_id == message_id and letters[0].payload["message"] == "what is 17*23"


async def test_408_is_not_retried_and_the_user_is_told(database_url: str) -> None:
    async with fake_stack(database_url) as (fake, stack):
        fake.default_mode = "408"
        cid = await stack.conversation()
        async with await connect(stack.chat_url, cid, "alice") as ws:
            await send_agent_message(stack, cid)
            frames = await recv_until(ws, lambda f: f["type"] == "agent.error")
        await stack.state.tasks.join()
        replies = await assistant_messages(stack, cid)
        breaker_failures = stack.state.agent.breaker.recent_failures

    assert len(fake.execute_calls) == 1
    error = frames_of(frames, "message.error")[0]["data"]
    assert "took too long" in error["text"] and error["text"] == AgentRequestTimeoutError.user_message
    assert frames[-1]["data"]["code"] == "AgentRequestTimeoutError"
    # No fallback: no notice, no direct answer; the one assistant message is the visible error.
    assert not frames_of(frames, "notice")
    assert len(replies) == 1 and replies[0].status == "error"
    # The service answered, so it is not unhealthy: the breaker does not count it.
    assert breaker_failures == 0


async def test_400_is_not_retried_and_the_user_gets_a_readable_message(database_url: str) -> None:
    async with fake_stack(database_url) as (fake, stack):
        fake.default_mode = "400"
        cid = await stack.conversation()
        async with await connect(stack.chat_url, cid, "alice") as ws:
            message_id = await send_agent_message(stack, cid)
            frames = await recv_until(ws, lambda f: f["type"] == "agent.error")
        await stack.state.tasks.join()
        letters = await dead_letters(stack, cid)
        replies = await assistant_messages(stack, cid)

    assert len(fake.execute_calls) == 1
    error = frames_of(frames, "message.error")[0]["data"]
    assert error["text"] == AgentBadRequestError.user_message
    assert frames[-1]["data"]["message"] == AgentBadRequestError.user_message
    # The Agent Service's technical detail is logged in the dead letter, never shown to the user.
    raw_detail = ERROR_STATUSES["400"][2]
    assert raw_detail not in frames_text(frames) and "chat_history" not in frames_text(frames)
    assert not frames_of(frames, "notice")
    assert len(letters) == 1 and letters[0].message_id == message_id
    assert letters[0].error_code == "AgentBadRequestError" and letters[0].attempts == 1
    assert raw_detail in letters[0].error_detail
    assert [m.status for m in replies] == ["error"]


async def test_500_is_retried_once_then_fails_gracefully(database_url: str) -> None:
    async with fake_stack(database_url) as (fake, stack):
        fake.default_mode = "500"
        cid = await stack.conversation()
        async with await connect(stack.chat_url, cid, "alice") as ws:
            message_id = await send_agent_message(stack, cid)
            frames = await recv_until(ws, lambda f: f["type"] == "message.completed")
        await stack.state.tasks.join()
        letters = await dead_letters(stack, cid)

    assert len(fake.execute_calls) == 2
    assert {c.idempotency_key for c in fake.execute_calls} == {f"msg-{message_id}"}
    assert [n["data"]["text"] for n in frames_of(frames, "notice")] == [FALLBACK_NOTICE]
    assert "KeyError" not in frames_text(frames)
    assert len(letters) == 1 and letters[0].error_code == "AgentServerError" and letters[0].attempts == 2


async def test_500_then_success_answers_from_the_agent(database_url: str) -> None:
    async with fake_stack(database_url) as (fake, stack):
        fake.then("500", OK)
        cid = await stack.conversation()
        async with await connect(stack.chat_url, cid, "alice") as ws:
            await send_agent_message(stack, cid)
            frames = await recv_until(ws, lambda f: f["type"] == "agent.complete")
        await stack.state.tasks.join()
        letters = await dead_letters(stack, cid)

    assert [c.mode for c in fake.execute_calls] == ["500", OK]
    assert len({c.idempotency_key for c in fake.execute_calls}) == 1
    assert frames_of(frames, "message.completed")[-1]["data"]["content"] == ANSWER
    assert not frames_of(frames, "notice") and letters == []


async def test_breaker_opens_after_five_failures_and_lets_exactly_one_probe_through(database_url: str) -> None:
    async with fake_stack(database_url) as (fake, stack):
        fake.default_mode = "503"
        breaker = stack.state.agent.breaker
        cid = await stack.conversation()
        async with await connect(stack.chat_url, cid, "alice") as ws:
            for i in range(5):
                assert breaker.state is BreakerState.CLOSED, i
                await send_agent_message(stack, cid, f"/agent what is {i}*2")
                await recv_until(ws, lambda f: f["type"] == "message.completed")
                await stack.state.tasks.join()
            assert breaker.state is BreakerState.OPEN
            calls_when_opened = len(fake.execute_calls)
            assert calls_when_opened == 5 * 4

            # The 6th agent message goes straight to the direct LLM, with the notice.
            r = await stack.send(cid, AGENT_COMMAND)
            assert r.status_code == 202
            assert r.json()["route"] == {"target": "direct_llm", "reason": "agent_unavailable"}
            frames = await recv_until(ws, lambda f: f["type"] == "message.completed")
            await stack.state.tasks.join()
            assert [n["data"]["text"] for n in frames_of(frames, "notice")] == [FALLBACK_NOTICE]
            assert frames[-1]["data"]["content"]
            assert len(fake.execute_calls) == calls_when_opened  # the agent was not called

        # After the open period the breaker is half-open: it lets one probe through.
        async with asyncio.timeout(OPEN_S + 5):
            while breaker.state is not BreakerState.HALF_OPEN:
                await asyncio.sleep(0.02)
        fake.default_mode = HOLD  # the probe is held until the test has seen the others refused
        conversations = [await stack.conversation() for _ in range(5)]
        sockets = [await connect(stack.chat_url, c, "alice") for c in conversations]
        try:
            responses = await asyncio.gather(*(stack.send(c, AGENT_COMMAND) for c in conversations))
            assert all(r.status_code == 202 for r in responses)
            await fake.wait_for_calls(calls_when_opened + 1)
            probe_cid = fake.execute_calls[-1].conversation_id
            assert probe_cid in conversations
            probe_ws = sockets[conversations.index(probe_cid)]
            others = [ws for c, ws in zip(conversations, sockets) if c != probe_cid]
            # Every other message is answered by the direct LLM, with the notice, while the probe runs.
            for ws in others:
                frames = await recv_until(ws, lambda f: f["type"] == "message.completed")
                assert [n["data"]["text"] for n in frames_of(frames, "notice")] == [FALLBACK_NOTICE]
                assert not [f for f in frames if f["type"].startswith("agent.")]
            assert len(fake.execute_calls) == calls_when_opened + 1
            assert breaker.state is BreakerState.HALF_OPEN

            fake.release()
            probe = await recv_until(probe_ws, lambda f: f["type"] == "agent.complete")
            await stack.state.tasks.join()
            assert frames_of(probe, "message.completed")[-1]["data"]["content"] == ANSWER
            assert breaker.state is BreakerState.CLOSED  # the probe succeeded

            # Closed again: the next agent message reaches the agent.
            fake.default_mode = OK
            await send_agent_message(stack, conversations[0])
            await recv_until(sockets[0], lambda f: f["type"] == "agent.complete")
            assert len(fake.execute_calls) == calls_when_opened + 2
        finally:
            for ws in sockets:
                await ws.close()


async def test_a_failed_probe_opens_the_breaker_again(database_url: str) -> None:
    async with fake_stack(database_url, agent_breaker_failures=1, agent_retry_delays_s="") as (fake, stack):
        fake.default_mode = "503"
        breaker = stack.state.agent.breaker
        cid = await stack.conversation()
        async with await connect(stack.chat_url, cid, "alice") as ws:
            await send_agent_message(stack, cid)
            await recv_until(ws, lambda f: f["type"] == "message.completed")
            await stack.state.tasks.join()
            assert breaker.state is BreakerState.OPEN and len(fake.execute_calls) == 1
            async with asyncio.timeout(OPEN_S + 5):
                while breaker.state is not BreakerState.HALF_OPEN:
                    await asyncio.sleep(0.02)
            await send_agent_message(stack, cid)  # the probe: fails
            await recv_until(ws, lambda f: f["type"] == "message.completed")
            await stack.state.tasks.join()
        assert len(fake.execute_calls) == 2
        assert breaker.state is BreakerState.OPEN


async def test_a_stream_cut_mid_event_is_resumed_and_every_delta_arrives_once(database_url: str) -> None:
    async with fake_stack(database_url) as (fake, stack):
        fake.default_mode = CUT
        fake.cut_after = 5  # THOUGHT, TOOL_START, TOOL_END and two chunks; cut inside the third
        cid = await stack.conversation()
        async with await connect(stack.chat_url, cid, "alice") as ws:
            await send_agent_message(stack, cid)
            frames = await recv_until(ws, lambda f: f["type"] in ("agent.complete", "agent.error"))
        await stack.state.tasks.join()
        replies = await assistant_messages(stack, cid)
        letters = await dead_letters(stack, cid)
        breaker_failures = stack.state.agent.breaker.recent_failures

    assert frames[-1]["type"] == "agent.complete", [f["type"] for f in frames]
    # One execute (no second run), then one resume from the last complete event.
    assert len(fake.execute_calls) == 1
    session_id = fake.execute_calls[0].session_id or replies[0].agent_session_id
    assert fake.resume_calls == [(session_id, "5")]
    deltas = [f["data"]["text"] for f in frames_of(frames, "message.delta")]
    # Every chunk exactly once and in order (chunks queued together may share a delta frame).
    assert "".join(deltas) == "".join(ANSWER_CHUNKS)
    assert len(frames_of(frames, "agent.tool_start")) == 1 and len(frames_of(frames, "agent.tool_end")) == 1
    assert frames_of(frames, "message.completed")[-1]["data"]["content"] == ANSWER
    seqs = [f["seq"] for f in frames]
    assert seqs == sorted(set(seqs))
    assert len(replies) == 1 and replies[0].status == "complete" and replies[0].content == ANSWER
    assert letters == [] and breaker_failures == 0
