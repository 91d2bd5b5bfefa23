"""Redis restarted empty under two chat replicas while an agent reply streams: the reply completes on
both replicas' clients.

Redis only accelerates (DESIGN §8): it numbers frames and carries them between replicas. With it
away, frame seqs come from the durable reservation in the database, and a replica whose clients
missed frames fills them in from the database; when it is back (empty), counting resumes above
everything handed out meanwhile. Both chat replicas are real processes on one PostgreSQL database,
with a Redis server of the test's own, which is killed and started again (empty) mid-reply; one
client is on the replica streaming the reply, one on the other.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from conversation_service.db import migrate
from tests.chaos.chat_support import (
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
from tests.chaos.conftest import ANSWER
from tests.support.databases import fresh_database, postgres_available, services_required
from tests.support.dependencies import PrivateRedis

TRIES = 2


@pytest.fixture
async def chat_database(tmp_path):
    if not postgres_available():
        if services_required():
            pytest.fail("PostgreSQL is required (CI=true) for the Redis restart test")
        pytest.skip("needs PostgreSQL; CI runs it")
    async with fresh_database("postgres", tmp_path, "chaos") as url:
        await migrate.upgrade_url(url, "head")
        yield url


@pytest.mark.timeout(170)
async def test_a_reply_completes_on_both_replicas_when_redis_restarts_empty(
    tmp_path: Path, chat_database: str, redis: PrivateRedis, long_answers: dict[str, str],
) -> None:
    agent = agent_process(f"sqlite+aiosqlite:///{tmp_path / 'agent.db'}", tmp_path, **long_answers)
    await agent.start(tmp_path)
    shared = {"REDIS_URL": redis.url, "REDIS_CHANNEL_PREFIX": f"chaos:{uuid.uuid4().hex}", **long_answers}
    a, b = chat_process(chat_database, agent.url, **shared), chat_process(chat_database, agent.url, **shared)
    await a.start(tmp_path)
    await b.start(tmp_path)
    figures = []
    try:
        for _ in range(TRIES):
            figures.append(await _restart_mid_reply(redis, a.url, b.url))
    finally:
        await a.stop()
        await b.stop()
        await agent.stop()
    record(tmp_path, "redis_restart_two_replicas", {"tries": TRIES, "runs": figures})


async def _restart_mid_reply(redis: PrivateRedis, a: str, b: str) -> dict:
    cid = await new_conversation(a)
    on_a, on_b = ChatClient(cid), ChatClient(cid)
    await on_a.connect(a)
    await on_b.connect(b)
    user_id = (await send(a, cid, "/agent tell me a long story"))["message_id"]  # the turn is A's
    await on_b.wait_for(lambda f: f["type"] == "message.delta"
                        and f["data"]["message_id"] == reply_id(on_b.frames, user_id), 30)
    away_s = await redis.restart()
    reply = reply_id(on_a.frames, user_id)
    ends = [await client.wait_for(lambda f: is_end_of(f, reply), 60) for client in (on_a, on_b)]
    await on_a.close()
    await on_b.close()

    answer = ANSWER
    for name, client, end in (("A", on_a, ends[0]), ("B", on_b, ends[1])):
        assert end["type"] == "message.completed", (name, end)
        assert end["data"]["content"] == answer, name
        assert_once_in_order(client.frames)
        assert shown_text(client.frames, reply) == answer, name
    assert_seqs_are_forever(on_a.frames, on_b.frames)
    stored = {m["id"]: m for m in await stored_messages(b, cid)}[reply]
    assert (stored["status"], stored["content"]) == ("complete", answer)
    # The next message goes through both replicas as usual, Redis back and empty.
    replay = ChatClient(cid)
    await replay.connect(b, resume=True)
    await replay.wait_for(lambda f: f["seq"] >= on_a.last_seq, 15)
    following = (await send(b, cid, "/agent tell me another"))["message_id"]
    await replay.wait_for(lambda f: is_end_of(f, reply_id(replay.frames, following)), 60)
    await replay.close()
    assert_seqs_are_forever(on_a.frames, on_b.frames, replay.frames)
    return {"redis_away_s": round(away_s, 2), "frames_a": len(on_a.frames), "frames_b": len(on_b.frames)}
