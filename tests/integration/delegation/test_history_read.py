"""A turn of a long conversation reads the messages its history window can take, not the whole
conversation: its cost (rows read, objects built, memory held while the turn runs) must not grow
with the conversation's length. When so many of the newest are blank that the window would come
up short, older ones are read too, so the window the agent gets is the same either way.

The ConversationService is the real app on loopback (SQLite and PostgreSQL); the Agent Service is
``FakeAgentService``, which records the chat history each execute carried.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from conversation_service.db.models import Message
from conversation_service.messages.repository import MessageRepository
from shared.protocol import utcnow
from shared.transactions import transaction
from tests.integration.conversation_service.support import connect
from tests.integration.delegation.stack import recv_until
from tests.integration.delegation.test_resilience import ends_turn, fake_stack, send_agent_message

STORED = 300  # a conversation far longer than the default window (HISTORY_MAX_MESSAGES, 10)


async def _store(stack, cid: str, contents: list[str]) -> None:
    """Messages of an earlier exchange, oldest first, a second apart and well before now."""
    start = utcnow() - timedelta(hours=1)
    async with transaction(stack.state.storage.sessionmaker) as session:
        for i, content in enumerate(contents):
            session.add(Message(conversation_id=cid, role="user" if i % 2 == 0 else "assistant", content=content,
                                created_at=start + timedelta(seconds=i)))


def _record_reads(monkeypatch) -> list[tuple[int, int]]:
    """(limit, rows returned) of each history read; the read itself is the product's."""
    reads: list[tuple[int, int]] = []
    complete_before = MessageRepository.complete_before

    async def recorded(self, message, limit):
        rows = await complete_before(self, message, limit)
        reads.append((limit, len(rows)))
        return rows

    monkeypatch.setattr(MessageRepository, "complete_before", recorded)
    return reads


@pytest.mark.parametrize("blank_newest", [0, 12])
async def test_a_long_conversation_s_turn_reads_only_what_its_window_can_take(
    database_url: str, monkeypatch, blank_newest: int,
) -> None:
    reads = _record_reads(monkeypatch)
    contents = [f"message {i}" for i in range(STORED - blank_newest)] + [" "] * blank_newest
    async with fake_stack(database_url) as (fake, stack):
        cid = await stack.conversation()
        await _store(stack, cid, contents)
        async with await connect(stack.chat_url, cid, "alice") as ws:
            await send_agent_message(stack, cid, "/agent what did we say?")
            await recv_until(ws, ends_turn)
    (call,) = fake.execute_calls
    usable = [c for c in contents if c.strip()]
    assert call.chat_history == usable[-10:]  # the default window: the ten newest usable messages
    if blank_newest == 0:
        assert reads == [(18, 18)]  # ten, and a few the window might skip: not 300
    else:
        # The eighteen newest held only six usable ones: everything allowed is read, once.
        assert reads == [(18, 18), (10_000, STORED)]
