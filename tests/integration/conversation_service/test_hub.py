"""One suite for every Hub implementation (in-process and Redis), plus two app replicas sharing
one database and one Redis."""

from __future__ import annotations

import asyncio
import uuid
from urllib.parse import urlsplit

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
from tests.support.dependencies import TcpRelay


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
    async with running(settings) as (base_a, _), running(settings) as (base_b, _):
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


# --- RedisHub across replicas -------------------------------------------------------------------


@pytest.fixture
async def redis_pair(redis_url: str):
    """Two hubs on one channel, as two replicas would be."""
    import uuid

    channel = f"test:{uuid.uuid4().hex}"
    a, b = RedisHub(redis_url, channel), RedisHub(redis_url, channel)
    await a.start()
    await b.start()
    yield a, b
    await a.close()
    await b.close()


async def test_publishing_replica_delivers_to_its_own_clients_before_any_redis_round_trip(redis_pair) -> None:
    a, _ = redis_pair
    own = Collector(1)
    a.subscribe("A", own)
    await a.publish(Frame("message.delta", 1, "A", {"text": "x"}))
    assert [f.seq for f in own.frames] == [1]


async def test_other_replicas_get_each_frame_once_and_in_order(redis_pair) -> None:
    a, b = redis_pair
    on_a, on_b = Collector(21), Collector(20)
    a.subscribe("A", on_a)
    b.subscribe("A", on_b)
    for seq in range(1, 21):
        await a.publish(Frame("message.delta", seq, "A", {"text": str(seq)}))
    await asyncio.wait_for(on_b.done.wait(), 5)
    # B's frame is on the channel after A's twenty: once A has it, A has read its own echoes too.
    await b.publish(Frame("notice", 21, "A", {"text": "from b"}))
    await asyncio.wait_for(on_a.done.wait(), 5)
    # Each replica has every frame once: its own at publish, the other's through Redis.
    assert [f.seq for f in on_a.frames] == list(range(1, 22))
    assert on_b.frames == on_a.frames


async def test_frame_of_an_earlier_release_is_still_delivered(redis_pair, redis_url: str) -> None:
    import redis.asyncio as aioredis

    _, b = redis_pair
    on_b = Collector(1)
    b.subscribe("A", on_b)
    client = aioredis.from_url(redis_url)
    try:
        await client.publish(b.channel, Frame("notice", 7, "A", {"text": "bare"}).to_json())
    finally:
        await client.aclose()
    await asyncio.wait_for(on_b.done.wait(), 5)
    assert on_b.frames[0] == Frame("notice", 7, "A", {"text": "bare"})


async def test_publish_neither_waits_nor_fails_while_redis_is_unreachable(redis_url: str) -> None:
    """Through a TCP relay to the real Redis that the test cuts: the publishing replica's clients
    keep getting frames at once; the frames for other replicas wait in the outbox while Redis is
    away, and only those past its size are dropped (their clients refill from the database)."""
    relay = TcpRelay(urlsplit(redis_url).port or 6379)
    await relay.start()
    dropped: list[int] = []
    hub = RedisHub(f"redis://127.0.0.1:{relay.port}{urlsplit(redis_url).path}", f"test:{uuid.uuid4().hex}",
                   retry_pauses=(0.05,), dropped=dropped.append, outbox_size=2)
    await hub.start()
    try:
        own = Collector(5)
        hub.subscribe("A", own)
        relay.cut()
        for seq in range(1, 6):
            async with asyncio.timeout(0.5):
                await hub.publish(Frame("message.delta", seq, "A", {"text": str(seq)}))
        assert [f.seq for f in own.frames] == [1, 2, 3, 4, 5]
        assert sum(dropped) == 3  # the outbox holds two while Redis is away
    finally:
        await hub.close()
        await relay.close()
    assert sum(dropped) == 5  # closing with Redis still away: the two it held are given up, counted


class Refills(Collector):
    """A client that the hub asks to catch up from the database (``Refillable``)."""

    def __init__(self, hub: RedisHub | None = None) -> None:
        super().__init__(expected=1)
        self.hub = hub
        self.refills = 0
        self.refilled = asyncio.Event()
        self.refilled_subscribed = asyncio.Event()  # a refill asked once the subscription was back

    def refill(self) -> None:
        self.refills += 1
        self.refilled.set()
        if self.hub is not None and self.hub._subscribed.is_set():
            self.refilled_subscribed.set()


async def test_clients_are_refilled_from_the_database_while_the_subscription_is_down(redis_url: str) -> None:
    relay = TcpRelay(urlsplit(redis_url).port or 6379)
    await relay.start()
    hub = RedisHub(f"redis://127.0.0.1:{relay.port}{urlsplit(redis_url).path}", f"test:{uuid.uuid4().hex}",
                   poll_s=0.05)
    await hub.start()
    try:
        client = Refills(hub)
        hub.subscribe("A", client)
        relay.cut()  # the subscription breaks; nothing reaches this replica through Redis now
        for _ in range(3):  # polled, again and again, while it is down
            client.refilled.clear()
            await asyncio.wait_for(client.refilled.wait(), 5)
        assert not client.refilled_subscribed.is_set()
        relay.restore()
        # Back: once more for what was published meanwhile, then no more polling.
        await asyncio.wait_for(client.refilled_subscribed.wait(), 10)
        settled = client.refills
        await asyncio.sleep(0.3)  # six poll periods: a poller still running would have refilled again
        assert client.refills == settled
    finally:
        await hub.close()
        await relay.close()


async def test_a_replica_whose_outbox_dropped_frames_has_the_others_refill_them(redis_url: str) -> None:
    relay = TcpRelay(urlsplit(redis_url).port or 6379)
    await relay.start()
    channel = f"test:{uuid.uuid4().hex}"
    sender = RedisHub(f"redis://127.0.0.1:{relay.port}{urlsplit(redis_url).path}", channel,
                      retry_pauses=(0.05,), outbox_size=1)
    receiver = RedisHub(redis_url, channel)
    await sender.start()
    await receiver.start()
    try:
        other = Refills()
        receiver.subscribe("A", other)
        relay.cut()
        for seq in range(1, 4):  # one waits in the outbox, two are dropped
            await sender.publish(Frame("message.delta", seq, "A", {"text": str(seq)}))
        other.refilled.clear()
        relay.restore()
        await asyncio.wait_for(other.refilled.wait(), 10)  # told to refill conversation A
        await asyncio.wait_for(other.done.wait(), 10)  # and the frame the outbox held arrives too
        assert [f.seq for f in other.frames] == [1]
    finally:
        await sender.close()
        await receiver.close()
        await relay.close()
