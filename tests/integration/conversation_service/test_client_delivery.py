"""How a published frame reaches the WebSocket clients of its conversation.

A client that keeps up gets each frame written in the publisher's own step: no pass of the event
loop between publishing and the socket write. A client whose socket is full holds up no one: its
frames queue (up to ``WS_CLIENT_QUEUE_SIZE``), and past that it is closed so it can resume.
Real server, real sockets; the slow client really stops reading (see ``connect_not_reading``).
"""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from conversation_service.errors import WS_TRY_AGAIN_LATER
from conversation_service.realtime.frames import FrameType
from conversation_service.websocket.router import SLOW_CONSUMER_REASON
from tests.integration.conversation_service.support import (
    Reader,
    connect,
    connect_not_reading,
    make_settings,
    new_conversation,
    recv_frame,
    running,
)

QUEUE_SIZE = 4
FRAME_TEXT = "x" * 16_000
# Far more than loopback kernel buffers can hold: the slow client's socket fills long before.
MAX_FRAMES = 4_000
PING = json.dumps({"type": "ping", "data": {}})
PONG = {"type": "pong", "data": {}}


async def publish_until_write_waits(publisher, cid: str, fast: Reader, fast_conn, stuck_conn, *, read_before: int) -> int:
    """Publish 16 KB deltas (n = 1, 2 ... in a new conversation, so n is the seq) until the write to
    ``stuck_conn``, whose client does not read, has to wait; ``fast`` (which had ``read_before``
    frames) gets each one inside its publish. Returns the n of that last frame."""
    published = 0
    while True:
        assert published < MAX_FRAMES, "the write to the client that does not read never blocked"
        published += 1
        frame = await publisher.emit(cid, FrameType.MESSAGE_DELTA, {"n": published, "text": FRAME_TEXT})
        assert frame.seq == published and fast_conn.last_sent == frame.seq
        if stuck_conn.last_sent < frame.seq:
            return published
        await fast.wait_for(read_before + published, timeout=10)


def capture_connections(hub) -> list:
    """The hub's subscribers as they subscribe: the server's ``ClientConnection`` of each client."""
    connections: list = []
    subscribe = hub.subscribe

    def recording(conversation_id: str, subscriber):
        connections.append(subscriber)
        return subscribe(conversation_id, subscriber)

    hub.subscribe = recording
    return connections


def sample(app, name: str) -> float:
    return app.state.metrics.registry.get_sample_value(name) or 0.0


async def test_a_frame_for_a_client_that_keeps_up_is_written_before_the_publish_returns(database_url: str) -> None:
    async with running(make_settings(database_url)) as (base, app):
        publisher = app.state.realtime.publisher
        async with httpx.AsyncClient() as client:
            cid = (await new_conversation(client, base, "alice"))["id"]
        ws = await connect(base, cid, "alice")
        try:
            # Answered: the connection has started sending and has nothing queued.
            await ws.send(PING)
            assert await recv_frame(ws) == PONG
            # The conversation's first frame in this process reserves a block of seqs (one write,
            # realtime.seq); the frames after it, measured here, wait for nothing.
            first = await publisher.emit(cid, FrameType.NOTICE, {"code": "warm", "text": "-"})
            assert await recv_frame(ws) == first.to_dict()
            sent_before = sample(app, "conversation_ws_frames_sent_total")
            loop_passes: list[str] = []
            asyncio.get_running_loop().call_soon(loop_passes.append, "a loop pass")

            frame = await publisher.emit(cid, FrameType.MESSAGE_DELTA, {"message_id": "m", "text": "hi"})

            # Written to the socket inside the publish, before the loop ran anything else.
            assert sample(app, "conversation_ws_frames_sent_total") == sent_before + 1
            assert loop_passes == []
            assert await recv_frame(ws) == frame.to_dict()
        finally:
            await ws.close()


async def test_a_blocked_client_delays_no_other_and_is_cut_off_past_its_queue(database_url: str) -> None:
    settings = make_settings(database_url, ws_client_queue_size=QUEUE_SIZE)
    async with running(settings) as (base, app):
        publisher = app.state.realtime.publisher
        connections = capture_connections(app.state.realtime.hub)
        async with httpx.AsyncClient() as client:
            cid = (await new_conversation(client, base, "alice"))["id"]
        fast = Reader(await connect(base, cid, "alice"))
        slow = await connect_not_reading(base, cid, "alice")
        try:
            fast_conn, slow_conn = connections
            # Both answered a ping: both connections have started sending. The pong is the one
            # frame the slow client takes in until the test reads from it again.
            await slow.send(PING)
            assert json.loads(await asyncio.wait_for(slow.recv(), 10)) == PONG
            await fast.ws.send(PING)
            await fast.wait_for(1, timeout=10)

            async def publish(n: int):
                return await publisher.emit(cid, FrameType.MESSAGE_DELTA, {"n": n, "text": FRAME_TEXT})

            published = blocked_at = await publish_until_write_waits(
                publisher, cid, fast, fast_conn, slow_conn, read_before=1)

            # From here on nothing lets the loop run, so the slow client's write stays blocked. Its
            # queue takes QUEUE_SIZE frames; the fast client gets each one inside the publish.
            loop_passes: list[str] = []
            asyncio.get_running_loop().call_soon(loop_passes.append, "a loop pass")
            for _ in range(QUEUE_SIZE):
                published += 1
                frame = await publish(published)
                assert fast_conn.last_sent == frame.seq
                assert not slow_conn.overflowed.is_set()
            published += 1
            frame = await publish(published)
            assert fast_conn.last_sent == frame.seq
            assert slow_conn.overflowed.is_set()
            assert slow_conn.last_sent == blocked_at - 1
            assert loop_passes == []

            # The slow client reads again: what was written to it in order, then 1013.
            before_close: list[dict] = []
            with pytest.raises(ConnectionClosed) as closed:
                async with asyncio.timeout(20):
                    while True:
                        before_close.append(json.loads(await slow.recv()))
            assert closed.value.rcvd is not None and closed.value.rcvd.code == WS_TRY_AGAIN_LATER
            assert closed.value.rcvd.reason == SLOW_CONSUMER_REASON
            assert [f["data"]["n"] for f in before_close] == list(range(1, blocked_at))

            await fast.wait_for(1 + published, timeout=10)
            assert [f["data"]["n"] for f in fast.frames[1:]] == list(range(1, published + 1))
            assert sample(app, "conversation_ws_slow_consumers_total") == 1
            assert not fast.task.done()
        finally:
            await fast.close()
            await slow.close()


async def test_a_client_gone_while_its_write_waits_ends_alone(database_url: str, caplog) -> None:
    async with running(make_settings(database_url)) as (base, app):
        publisher = app.state.realtime.publisher
        connections = capture_connections(app.state.realtime.hub)
        async with httpx.AsyncClient() as client:
            cid = (await new_conversation(client, base, "alice"))["id"]
        fast = Reader(await connect(base, cid, "alice"))
        gone = await connect_not_reading(base, cid, "alice")
        try:
            fast_conn, gone_conn = connections
            await gone.send(PING)
            assert json.loads(await asyncio.wait_for(gone.recv(), 10)) == PONG
            published = await publish_until_write_waits(publisher, cid, fast, fast_conn, gone_conn, read_before=0)

            caplog.set_level(logging.ERROR, logger="conversation_service")
            gone.transport.abort()  # the client vanishes with a write to it under way
            async with asyncio.timeout(10):
                while sample(app, "conversation_ws_connections") > 1:
                    published += 1
                    await publisher.emit(cid, FrameType.MESSAGE_DELTA, {"n": published, "text": "after"})
                    await fast.wait_for(published, timeout=10)

            # The publisher and the other client carried on; nothing was logged as a failure.
            for _ in range(3):
                published += 1
                await publisher.emit(cid, FrameType.MESSAGE_DELTA, {"n": published, "text": "after"})
            await fast.wait_for(published, timeout=10)
            assert [f["data"]["n"] for f in fast.frames] == list(range(1, published + 1))
            assert fast_conn.last_sent == published
            assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
        finally:
            await fast.close()
            await gone.close()


async def test_live_frames_published_during_the_replay_follow_it_each_once(database_url: str) -> None:
    history = 1_200  # several replay reads
    live = 50
    async with running(make_settings(database_url)) as (base, app):
        publisher = app.state.realtime.publisher
        async with httpx.AsyncClient() as client:
            cid = (await new_conversation(client, base, "alice"))["id"]
        for n in range(1, history + 1):
            await publisher.emit(cid, FrameType.MESSAGE_DELTA, {"n": n, "text": "h"})
        await app.state.realtime.writer.flush()
        ws = Reader(await connect(base, cid, "alice", after_seq=0))
        try:
            # The replay is under way (the handshake completed before it started); these arrive
            # while it reads the history and must come after it.
            for n in range(history + 1, history + live + 1):
                await publisher.emit(cid, FrameType.MESSAGE_DELTA, {"n": n, "text": "live"})
            await ws.wait_for(history + live, timeout=30)
            assert [f["data"]["n"] for f in ws.frames] == list(range(1, history + live + 1))
            assert [f["seq"] for f in ws.frames] == list(range(1, history + live + 1))
        finally:
            await ws.close()
