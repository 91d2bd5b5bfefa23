"""One suite for every Hub implementation (in-process and Redis), plus two app replicas sharing
one database and one Redis."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from conversation_service.realtime.frames import Frame
from conversation_service.realtime.hub import Hub, InProcessHub, RedisHub
from tests.integration.conversation_service.support import (
    auth,
    collect_until,
    connect,
    make_settings,
    new_conversation,
    running,
)


class Collector:
    def __init__(self, expected: int) -> None:
        self.frames: list[Frame] = []
        self.expected = expected
        self.done = asyncio.Event()

    def deliver(self, frame: Frame) -> None:
        self.frames.append(frame)
        if len(self.frames) >= self.expected:
            self.done.set()


class Stuck:
    """A subscriber whose deliver is slow would stall publish if the hub awaited it."""

    def __init__(self) -> None:
        self.count = 0

    def deliver(self, frame: Frame) -> None:
        self.count += 1


@pytest.fixture(params=["in_process", "redis"])
async def hub(request) -> Hub:
    if request.param == "redis":
        redis_url = request.getfixturevalue("redis_url")
        import uuid

        h: Hub = RedisHub(redis_url, f"test:{uuid.uuid4().hex}")
    else:
        h = InProcessHub()
    await h.start()
    yield h
    await h.close()


async def test_frames_reach_subscribers_of_their_conversation_only(hub: Hub) -> None:
    a1, a2, b = Collector(20), Collector(20), Collector(1)
    hub.subscribe("A", a1)
    hub.subscribe("A", a2)
    unsubscribe_b = hub.subscribe("B", b)
    for seq in range(1, 21):
        await hub.publish(Frame("message.delta", seq, "A", {"text": str(seq)}))
    await asyncio.wait_for(asyncio.gather(a1.done.wait(), a2.done.wait()), 5)
    assert [f.seq for f in a1.frames] == list(range(1, 21))
    assert a1.frames == a2.frames
    assert b.frames == []
    unsubscribe_b()
    assert hub.subscriber_count("B") == 0 and hub.subscriber_count("A") == 2


async def test_unsubscribed_client_gets_nothing_more(hub: Hub) -> None:
    c, witness = Collector(1), Collector(1)
    unsubscribe = hub.subscribe("C", c)
    hub.subscribe("C", witness)
    unsubscribe()
    await hub.publish(Frame("notice", 1, "C", {"text": "x"}))
    await asyncio.wait_for(witness.done.wait(), 5)
    assert c.frames == []


async def test_two_replicas_share_frames_through_redis(database_factory, redis_url: str) -> None:
    import uuid

    url = await database_factory("conv")
    prefix = f"test:{uuid.uuid4().hex}"
    settings = make_settings(url, redis_url=redis_url, redis_channel_prefix=prefix)
    async with running(settings) as (base_a, app_a), running(settings) as (base_b, app_b):
        async with httpx.AsyncClient() as client:
            conv = await new_conversation(client, base_a, "alice")
            async with await connect(base_b, conv["id"], "alice") as ws_b:
                r = await client.post(f"{base_a}/conversations/{conv['id']}/messages",
                                      json={"content": "hello from replica A"}, headers=auth("alice"))
                assert r.status_code == 202
                frames = await collect_until(ws_b, lambda f: f["type"] == "message.completed")
        deltas = "".join(f["data"]["text"] for f in frames if f["type"] == "message.delta")
        assert frames[-1]["data"]["content"] == deltas
        seqs = [f["seq"] for f in frames]
        assert seqs == sorted(set(seqs))
