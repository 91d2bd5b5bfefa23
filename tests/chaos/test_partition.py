"""The network between the chat and the Agent Service cut for 15 s mid-reply: the reply completes.

The run does not depend on the connection that started it: it goes on in the Agent Service and its
events wait in the durable log. The chat keeps resuming the event stream (``Last-Event-ID``) for its
resume budget (``AGENT_RESUME_BUDGET_S``, 30 s), so a partition shorter than that loses nothing: once
the network is back, the events the chat missed come from the log, each once, and the reply ends with
the whole answer. The services are real processes; a TCP relay between them resets every connection
and refuses new ones for the length of the cut.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.chaos.chat_support import (
    ChatClient,
    agent_process,
    assert_once_in_order,
    chat_process,
    is_end_of,
    new_conversation,
    record,
    reply_id,
    send,
    shown_text,
    stored_messages,
)
from tests.chaos.conftest import ANSWER
from tests.support.dependencies import TcpRelay

CUT_S = 15.0


@pytest.mark.timeout(120)
async def test_a_reply_completes_across_a_15_s_partition_between_the_services(
    tmp_path: Path, long_answers: dict[str, str],
) -> None:
    agent = agent_process(f"sqlite+aiosqlite:///{tmp_path / 'agent.db'}", tmp_path, **long_answers)
    await agent.start(tmp_path)
    relay = TcpRelay(agent.port)
    await relay.start()
    chat = chat_process(f"sqlite+aiosqlite:///{tmp_path / 'chat.db'}", relay.url, **long_answers)
    await chat.start(tmp_path)
    try:
        figures = await _partition_mid_reply(relay, chat.url)
    finally:
        relay.restore()
        await chat.stop()
        await agent.stop()
        await relay.close()
    record(tmp_path, "partition_between_services", figures)


async def _partition_mid_reply(relay: TcpRelay, chat_url: str) -> dict:
    cid = await new_conversation(chat_url)
    client = ChatClient(cid)
    await client.connect(chat_url)
    user_id = (await send(chat_url, cid, "/agent tell me a long story"))["message_id"]
    await client.wait_for(lambda f: f["type"] == "message.delta"
                          and f["data"]["message_id"] == reply_id(client.frames, user_id), 30)
    relay.cut()
    cut_at = time.monotonic()
    await asyncio.sleep(CUT_S)  # the fault itself: the services cannot reach each other this long
    relay.restore()
    reply = reply_id(client.frames, user_id)
    end = await client.wait_for(lambda f: is_end_of(f, reply), 40)
    ended_s = time.monotonic() - cut_at
    await client.close()

    answer = ANSWER
    assert end["type"] == "message.completed", end
    assert end["data"]["content"] == answer
    assert shown_text(client.frames, reply) == answer
    assert_once_in_order(client.frames)
    stored = {m["id"]: m for m in await stored_messages(chat_url, cid)}[reply]
    assert (stored["status"], stored["content"]) == ("complete", answer)
    return {"cut_s": CUT_S, "cut_to_reply_end_s": round(ended_s, 2), "frames": len(client.frames)}
