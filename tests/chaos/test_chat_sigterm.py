"""SIGTERM the ConversationService while replies stream: it stops its turns, flushes their frames
and releases their leases, so the restarted service takes them over at once (not a lease later).
The clients reconnect with ``after_seq``: the agent's answer completes, each chunk once; the
direct reply, which cannot be resumed, ends with an explicit error the user sees."""

from __future__ import annotations

import signal
import time

import pytest

from tests.chaos.chat_support import (
    AGENT_QUESTION,
    ChatClient,
    agent_process,
    assert_once_in_order,
    assert_seqs_are_forever,
    chat_process,
    is_end_of,
    new_conversation,
    record,
    reply_id,
    send,
    shown_text,
    stored_messages,
)

# Long, so that a takeover within it can only come from the released lease.
LONG_LEASE_S = 30.0


def _is_delta_of_reply(client: ChatClient, user_id: str):
    return lambda f: f["type"] == "message.delta" and f["data"]["message_id"] == reply_id(client.frames, user_id)


def _is_end_of_reply(client: ChatClient, user_id: str):
    return lambda f: is_end_of(f, reply_id(client.frames, user_id))


@pytest.mark.timeout(150)
async def test_sigterm_mid_stream_hands_the_turns_over_at_once(tmp_path) -> None:
    agent = agent_process(f"sqlite+aiosqlite:///{tmp_path / 'agent.db'}", tmp_path)
    await agent.start(tmp_path)
    chat = chat_process(f"sqlite+aiosqlite:///{tmp_path / 'chat.db'}", agent.url, MIGRATE_ON_START="true",
                        TURN_LEASE_S=str(LONG_LEASE_S))
    await chat.start(tmp_path)
    try:
        turns = {}
        for kind, content in (("agent", AGENT_QUESTION), ("direct", "tell me a long story")):
            cid = await new_conversation(chat.url)
            client = ChatClient(cid)
            await client.connect(chat.url)
            turns[kind] = (client, (await send(chat.url, cid, content))["message_id"])
        for client, user_id in turns.values():
            await client.wait_for(_is_delta_of_reply(client, user_id), 30)
        await chat.stop()  # SIGTERM
        # uvicorn re-raises the SIGTERM once its graceful shutdown (the app's lifespan) is complete.
        assert chat.proc.returncode in (0, -signal.SIGTERM), chat.logs()[-3000:]
        assert "Application shutdown complete" in chat.logs()
        await chat.start(tmp_path)
        restarted_at = time.monotonic()
        ends = {}
        for kind, (client, user_id) in turns.items():
            await client.close()
            await client.connect(chat.url, resume=True)
            ends[kind] = await client.wait_for(_is_end_of_reply(client, user_id), LONG_LEASE_S - 5)
        handed_over_s = time.monotonic() - restarted_at
        await _check(chat.url, turns, ends)
    finally:
        await chat.stop()
        await agent.stop()
    assert handed_over_s < LONG_LEASE_S - 5
    record(tmp_path, "chat_sigterm", {"tries": 1, "held": 1, "restart_to_both_ended_s": round(handed_over_s, 2),
                                      "lease_s": LONG_LEASE_S})


async def _check(base: str, turns: dict, ends: dict) -> None:
    client, user_id = turns["agent"]
    end = ends["agent"]
    assert end["type"] == "message.completed" and "391" in end["data"]["content"], end
    reply = reply_id(client.frames, user_id)
    assert shown_text(client.frames, reply) == end["data"]["content"]
    assert_once_in_order(client.frames)
    stored = {m["id"]: m for m in await stored_messages(base, client.cid)}[reply]
    assert stored["status"] == "complete" and stored["content"] == end["data"]["content"]

    client, user_id = turns["direct"]
    end, reply = ends["direct"], reply_id(client.frames, user_id)
    stored = {m["id"]: m for m in await stored_messages(base, client.cid)}[reply]
    if end["type"] == "message.error":
        assert end["data"]["code"] == "reply_interrupted" and end["data"]["retryable"] is True
        assert stored["status"] == "error" and stored["content"] == end["data"]["content"]
    else:
        assert stored["status"] == "complete"
    assert_once_in_order(client.frames)
    for client, _ in turns.values():
        replay = ChatClient(client.cid)
        await replay.connect(base, resume=True)
        await replay.wait_for(lambda f, upto=client.last_seq: f["seq"] >= upto, 10)
        await replay.close()
        assert_seqs_are_forever(client.frames, replay.frames)
