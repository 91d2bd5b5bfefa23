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

import pytest
from websockets.exceptions import ConnectionClosed

from conversation_service.errors import WS_TRY_AGAIN_LATER
from conversation_service.realtime.frames import MessageDelta, Notice
from conversation_service.websocket.router import SLOW_CONSUMER_REASON
from tests.integration.conversation_service.support import (
    FRAME_TEXT,
    PING,
    PONG,
    Reader,
    connect,
    make_settings,
    publish_until_write_waits,
    reader_and_stuck_client,
    recv_frame,
    running_with_conversation,
    sample,
)

QUEUE_SIZE = 4


async def test_a_frame_for_a_client_that_keeps_up_is_written_before_the_publish_returns(database_url: str) -> None:
    async with running_with_conversation(make_settings(database_url)) as (base, app, cid):
        publisher = app.state.realtime.publisher
        ws = await connect(base, cid, "alice")
        try:
            # Answered: the connection has started sending and has nothing queued.
            await ws.send(PING)
            assert await recv_frame(ws) == PONG
            # The conversation's first frame in this process reserves a block of seqs (one write,
            # realtime.seq); the frames after it, measured here, wait for nothing.
            first = await publisher.emit(cid, Notice("warm", "-"))
            assert await recv_frame(ws) == first.to_dict()
            sent_before = sample(app, "conversation_ws_frames_sent_total")
            loop_passes: list[str] = []
            asyncio.get_running_loop().call_soon(loop_passes.append, "a loop pass")

            frame = await publisher.emit(cid, MessageDelta("m", "hi"))

            # Written to the socket inside the publish, before the loop ran anything else.
            assert sample(app, "conversation_ws_frames_sent_total") == sent_before + 1
            assert loop_passes == []
            assert await recv_frame(ws) == frame.to_dict()
        finally:
            await ws.close()


async def test_a_blocked_client_delays_no_other_and_is_cut_off_past_its_queue(database_url: str) -> None:
    settings = make_settings(database_url, ws_client_queue_size=QUEUE_SIZE)
    async with running_with_conversation(settings) as (base, app, cid):
        publisher = app.state.realtime.publisher
        async with reader_and_stuck_client(base, app, cid) as (fast, slow, fast_conn, slow_conn):

            async def publish(n: int):
                return await publisher.emit(cid, MessageDelta(f"n{n}", FRAME_TEXT))

            published = blocked_at = await publish_until_write_waits(publisher, cid, fast, fast_conn, slow_conn)

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
            assert [int(f["data"]["message_id"][1:]) for f in before_close] == list(range(1, blocked_at))

            await fast.wait_for(1 + published, timeout=10)
            assert [int(f["data"]["message_id"][1:]) for f in fast.frames[1:]] == list(range(1, published + 1))
            assert sample(app, "conversation_ws_slow_consumers_total") == 1
            assert not fast.task.done()


async def test_a_client_gone_while_its_write_waits_ends_alone(database_url: str, caplog) -> None:
    async with running_with_conversation(make_settings(database_url)) as (base, app, cid):
        publisher = app.state.realtime.publisher
        async with reader_and_stuck_client(base, app, cid) as (fast, gone, fast_conn, gone_conn):
            published = await publish_until_write_waits(publisher, cid, fast, fast_conn, gone_conn)

            caplog.set_level(logging.ERROR, logger="conversation_service")
            gone.transport.abort()  # the client vanishes with a write to it under way
            async with asyncio.timeout(10):
                while sample(app, "conversation_ws_connections") > 1:
                    published += 1
                    await publisher.emit(cid, MessageDelta(f"n{published}", "after"))
                    await fast.wait_for(1 + published, timeout=10)

            # The publisher and the other client carried on; nothing was logged as a failure.
            for _ in range(3):
                published += 1
                await publisher.emit(cid, MessageDelta(f"n{published}", "after"))
            await fast.wait_for(1 + published, timeout=10)
            assert [int(f["data"]["message_id"][1:]) for f in fast.frames[1:]] == list(range(1, published + 1))
            assert fast_conn.last_sent == published
            assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_live_frames_published_during_the_replay_follow_it_each_once(database_url: str) -> None:
    history = 1_200  # several replay reads
    live = 50
    async with running_with_conversation(make_settings(database_url)) as (base, app, cid):
        publisher = app.state.realtime.publisher
        for n in range(1, history + 1):
            await publisher.emit(cid, MessageDelta(f"n{n}", "h"))
        await app.state.realtime.writer.flush()
        ws = Reader(await connect(base, cid, "alice", after_seq=0))
        try:
            # The replay is under way (the handshake completed before it started); these arrive
            # while it reads the history and must come after it.
            for n in range(history + 1, history + live + 1):
                await publisher.emit(cid, MessageDelta(f"n{n}", "live"))
            await ws.wait_for(history + live, timeout=30)
            assert [int(f["data"]["message_id"][1:]) for f in ws.frames] == list(range(1, history + live + 1))
            assert [f["seq"] for f in ws.frames] == list(range(1, history + live + 1))
        finally:
            await ws.close()
