"""A turn of a conversation with an open agent session uses the session and history the dispatcher
read while routing (no claim transaction of its own) only when no other turn of the conversation
came in between; otherwise it claims as before, once the earlier turn has ended.

The ConversationService is the real app on loopback (SQLite and PostgreSQL); the Agent Service is
``FakeAgentService``, which records the chat history each execute carried.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

from tests.integration.conversation_service.support import connect
from tests.integration.delegation.fake_agent import ANSWER, HOLD, OK
from tests.integration.delegation.stack import recv_until
from tests.integration.delegation.test_resilience import fake_stack, send_agent_message


def _count_claims(stack) -> list[str]:
    """Record each claim transaction the turns run (the method still does its work)."""
    delegation = stack.state.agent.delegation
    claim = delegation._claim_session
    claims: list[str] = []

    async def counted(conversation, user_message, request):
        claims.append(user_message.content)
        return await claim(conversation, user_message, request)

    delegation._claim_session = counted
    return claims


def _completes(n: int):
    seen = []

    def done(frame: dict) -> bool:
        if frame["type"] == "agent.complete":
            seen.append(frame)
        return len(seen) == n

    return done


@asynccontextmanager
async def _opened_conversation(database_url: str):
    """A conversation whose first agent turn has ended (its agent session stays open)."""
    async with fake_stack(database_url) as (fake, stack):
        claims = _count_claims(stack)
        cid = await stack.conversation()
        async with await connect(stack.chat_url, cid, "alice") as ws:
            await send_agent_message(stack, cid, "/agent first question")
            await recv_until(ws, _completes(1))
            yield fake, stack, cid, ws, claims


async def test_a_follow_up_uses_the_routing_read_and_carries_the_last_answer(database_url: str) -> None:
    async with _opened_conversation(database_url) as (fake, stack, cid, ws, claims):
        # The open session keeps the conversation with the agent; nothing else is under way.
        await send_agent_message(stack, cid, "second question")
        await recv_until(ws, _completes(1))
    assert claims == ["/agent first question"]  # the first turn created the session; the second read ahead
    first, second = fake.execute_calls
    assert first.session_id is None and second.session_id == first_session_id(fake)
    assert second.chat_history[-2:] == ["/agent first question", ANSWER]


async def test_a_message_sent_during_a_turn_claims_after_that_turn(database_url: str) -> None:
    async with _opened_conversation(database_url) as (fake, stack, cid, ws, claims):
        fake.then(HOLD, OK)
        await send_agent_message(stack, cid, "second question")
        await fake.wait_for_calls(2)
        # Sent while the second turn is held at the Agent Service: routed while a turn is in
        # flight, so its history is read after that turn, not while routing.
        await send_agent_message(stack, cid, "third question")
        fake.release()
        await recv_until(ws, _completes(2))
    assert claims == ["/agent first question", "third question"]
    # Its history is what came before it: the second question (whose answer started later).
    second, third = fake.execute_calls[1:]
    assert third.chat_history[-3:] == ["/agent first question", ANSWER, "second question"]
    assert third.session_id == second.session_id


def first_session_id(fake) -> str | None:
    return next(iter(fake._log))
