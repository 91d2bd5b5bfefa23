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
    keep getting frames at once; the frames for other replicas are tried again, then counted as
    dropped (their clients refill from the database)."""
    import uuid
    from urllib.parse import urlsplit

    target = urlsplit(redis_url)
    links: list[asyncio.StreamWriter] = []

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(target.hostname, target.port or 6379)
        links.extend([writer, up_writer])
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    dropped: list[int] = []
    all_dropped = asyncio.Event()

    def count_dropped(n: int) -> None:
        dropped.append(n)
        if sum(dropped) >= 5:
            all_dropped.set()

    hub = RedisHub(f"redis://127.0.0.1:{port}{target.path}", f"test:{uuid.uuid4().hex}",
                   retry_pauses=(0.05, 0.05), dropped=count_dropped)
    await hub.start()
    try:
        own = Collector(5)
        hub.subscribe("A", own)
        server.close()
        for link in links:
            link.close()
        for seq in range(1, 6):
            async with asyncio.timeout(0.5):
                await hub.publish(Frame("message.delta", seq, "A", {"text": str(seq)}))
        assert [f.seq for f in own.frames] == [1, 2, 3, 4, 5]
        await asyncio.wait_for(all_dropped.wait(), 10)
        assert sum(dropped) == 5
    finally:
        await hub.close()
        await server.wait_closed()
