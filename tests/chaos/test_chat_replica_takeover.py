"""Two ConversationService replicas on PostgreSQL + Redis: the client is on B, the turn on A, and A
is killed (SIGKILL) after the reply's first delta. B takes the turn over once A's lease has run
out and B's client sees the agent's answer complete, each chunk once."""

from __future__ import annotations

import time
import uuid

import pytest

from conversation_service.db import migrate
from tests.chaos.chat_support import (
    AGENT_QUESTION,
    LEASE_S,
    SWEEP_S,
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
from tests.support.databases import (
    REDIS_URL,
    fresh_database,
    postgres_available,
    redis_available,
    services_required,
)

TRIES = 3


@pytest.fixture
async def chat_database(tmp_path):
    if not (postgres_available() and redis_available()):
        if services_required():
            pytest.fail("PostgreSQL and Redis are required (CI=true) for the replica takeover test")
        pytest.skip("needs PostgreSQL and Redis; CI runs it")
    async with fresh_database("postgres", tmp_path, "chaos") as url:
        await migrate.upgrade_url(url, "head")
        yield url


@pytest.mark.timeout(170)
async def test_a_turn_whose_replica_is_killed_is_taken_over_and_completes_on_the_other(
    tmp_path, chat_database: str
) -> None:
    agent = agent_process(f"sqlite+aiosqlite:///{tmp_path / 'agent.db'}", tmp_path)
    await agent.start(tmp_path)
    shared = {"REDIS_URL": REDIS_URL, "REDIS_CHANNEL_PREFIX": f"chaos:{uuid.uuid4().hex}"}
    b = chat_process(chat_database, agent.url, **shared)
    await b.start(tmp_path)
    takeover_s, end_s, held = [], [], 0
    try:
        for _ in range(TRIES):
            a = chat_process(chat_database, agent.url, **shared)
            await a.start(tmp_path)
            try:
                took, ended = await _kill_a_mid_stream(a, b)
            finally:
                await a.stop(kill=True)
            takeover_s.append(took)
            end_s.append(ended)
            held += 1
    finally:
        await b.stop()
        await agent.stop()

    assert max(takeover_s) <= LEASE_S + SWEEP_S + 5  # within the lease, as configured
    record(tmp_path, "chat_replica_takeover", {
        "tries": TRIES, "held": held, "lease_s": LEASE_S, "sweep_s": SWEEP_S,
        "kill_to_first_frame_from_b_s": percentiles(takeover_s), "kill_to_answer_complete_s": percentiles(end_s),
    })


async def _kill_a_mid_stream(a, b) -> tuple[float, float]:
    cid = await new_conversation(b.url)
    client = ChatClient(cid)
    await client.connect(b.url)
    accepted = await send(a.url, cid, AGENT_QUESTION)  # the turn is A's
    user_id = accepted["message_id"]
    await client.wait_for(lambda f: f["type"] == "message.delta"
                          and f["data"]["message_id"] == reply_id(client.frames, user_id), 30)
    await a.stop(kill=True)
    killed_at, seen_at_kill = time.monotonic(), client.last_seq
    first_after = await client.wait_for(lambda f: f["seq"] > seen_at_kill, LEASE_S + 15)
    took = time.monotonic() - killed_at
    reply = reply_id(client.frames, user_id)
    end = await client.wait_for(lambda f: is_end_of(f, reply), LEASE_S + 30)
    ended = time.monotonic() - killed_at
    await client.close()
    assert first_after is not None

    assert end["type"] == "message.completed", end
    answer = end["data"]["content"]
    assert "391" in answer
    assert shown_text(client.frames, reply) == answer  # the full answer on B's client, each chunk once
    assert_once_in_order(client.frames)
    stored = {m["id"]: m for m in await stored_messages(b.url, cid)}[reply]
    assert stored["status"] == "complete" and stored["content"] == answer
    replay = ChatClient(cid)
    await replay.connect(b.url, resume=True)
    await replay.wait_for(lambda f: f["seq"] >= client.last_seq, 10)
    await replay.close()
    assert_seqs_are_forever(client.frames, replay.frames)
    return took, ended
