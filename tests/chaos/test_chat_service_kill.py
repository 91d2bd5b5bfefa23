"""SIGKILL the ConversationService 0-3 s after the 202 of a message (agent and direct, alternately),
restart it on the same SQLite database: every message ends (its complete reply, or an explicit
error the user sees) with a stored status that says so, no frame seq is ever reused, and the
client resuming with ``after_seq`` gets every later frame once."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from tests.chaos.chat_support import (
    AGENT_QUESTION,
    LEASE_S,
    ChatClient,
    agent_process,
    assert_once_in_order,
    assert_seqs_are_forever,
    chat_process,
    is_end_of,
    new_conversation,
    percentiles,
    record,
    reply_id,
    send,
    shown_text,
    stored_messages,
)

TRIES = 10
# A turn is taken over within lease + sweep of the restart; the rest is the reply streaming on.
END_WITHIN_S = LEASE_S + 25


async def _one_try(chat, cid: str, content: str, kill_after: float) -> dict:
    client = ChatClient(cid)
    await client.connect(chat.url)
    accepted = await send(chat.url, cid, content)
    await _pause(kill_after)
    await chat.stop(kill=True)
    seen_live = list(client.frames)
    await client.close()
    restarted_at = time.monotonic()
    await chat.start(chat.log_path.parent)
    await client.connect(chat.url, resume=True)
    resumed_from = len(client.frames)
    user_id = accepted["message_id"]
    end = await client.wait_for(lambda f: is_end_of(f, reply_id(client.frames, user_id)), END_WITHIN_S)
    took = time.monotonic() - restarted_at
    # The user goes on: the next message's own message.created must not take a seq seen before.
    follow_up = await send(chat.url, cid, "thanks")
    await client.wait_for(lambda f: f["type"] == "message.created" and f["data"]["id"] == follow_up["message_id"], 10)
    await client.close()
    mid_reply = any(f["type"] == "message.delta" for f in seen_live)
    return {"client": client, "seen_live": seen_live, "mid_reply": mid_reply, "resumed": client.frames[resumed_from:], "end": end,
            "user_id": user_id, "took": took}


async def _pause(seconds: float) -> None:
    # The chaos: how long after the 202 the kill lands (seeded), not a wait for anything.
    await asyncio.sleep(seconds)


@pytest.mark.timeout(200)
async def test_every_message_ends_after_the_chat_service_is_killed_mid_turn(tmp_path) -> None:
    rng = random.Random(20261124)
    agent = agent_process(f"sqlite+aiosqlite:///{tmp_path / 'agent.db'}", tmp_path)
    await agent.start(tmp_path)
    chat = chat_process(f"sqlite+aiosqlite:///{tmp_path / 'chat.db'}", agent.url, MIGRATE_ON_START="true")
    await chat.start(tmp_path)
    results = []
    try:
        for i in range(TRIES):
            kind = "agent" if i % 2 == 0 else "direct"
            content = AGENT_QUESTION if kind == "agent" else f"tell me a short story number {i}"
            cid = await new_conversation(chat.url)
            outcome = await _one_try(chat, cid, content, rng.uniform(0, 3))
            outcome.update(kind=kind, cid=cid)
            results.append(outcome)
        held = 0
        for outcome in results:
            await _check(chat.url, outcome)
            held += 1
    finally:
        await chat.stop()
        await agent.stop()

    ended = {"complete": 0, "error": 0}
    for outcome in results:
        ended["complete" if outcome["end"]["type"] == "message.completed" else "error"] += 1
    record(tmp_path, "chat_service_kill", {
        "tries": TRIES, "held": held, "ended": ended, "killed_mid_reply": sum(o["mid_reply"] for o in results),
        "end_after_restart_s": percentiles([o["took"] for o in results]),
    })


async def _check(base: str, outcome: dict) -> None:
    client: ChatClient = outcome["client"]
    replay = ChatClient(outcome["cid"])
    await replay.connect(base, resume=True)  # after_seq=0: the whole stored log
    await replay.wait_for(lambda f: f["seq"] >= client.last_seq, 10)
    await replay.close()
    # A seq is forever: what the client saw live before the kill, what it got after resuming and
    # what the log holds now agree on every seq.
    assert_seqs_are_forever(outcome["seen_live"], outcome["resumed"], replay.frames)
    # The resumed client got every later frame once, in order: those of the stored log.
    assert_once_in_order(outcome["resumed"])
    after = client.resumed_at[-1]
    assert outcome["resumed"] == [f for f in replay.frames if f["seq"] > after][:len(outcome["resumed"])]

    end, reply = outcome["end"], reply_id(client.frames, outcome["user_id"])
    stored = {m["id"]: m for m in await stored_messages(base, outcome["cid"])}[reply]
    if end["type"] == "message.completed":
        assert stored["status"] == "complete" and stored["content"] == end["data"]["content"]
        assert shown_text(client.frames, reply) == end["data"]["content"]  # each chunk once
        if outcome["kind"] == "agent":
            assert "391" in stored["content"]
    else:
        assert stored["status"] == "error", stored
        assert end["data"]["text"]  # the user sees why
        assert stored["content"] == end["data"].get("content", stored["content"])
