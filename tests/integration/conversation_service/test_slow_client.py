"""A slow WebSocket client never delays the others (DESIGN §7).

Two clients on one conversation: one reads everything as it comes, the other stops reading. The
slow one is a real TCP client that really does not read: its receive buffer is tiny and its
WebSocket library stops pulling bytes from the socket after one buffered frame, so the server's
writes to it block once the kernel buffers are full. The server's bounded per-client queue
(``WS_CLIENT_QUEUE_SIZE``) then overflows and the client is closed with 1013; it reconnects with
``after_seq`` and gets exactly what it missed.

The close frame goes out behind what the server had already sent, without waiting for the client
to read it: a client that stays stalled longer than the server's handler takes to finish still
gets 1013 and its reason once it reads again, not a bare 1006 (``websocket.protocol``).
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from conversation_service.errors import WS_TRY_AGAIN_LATER
from conversation_service.realtime.frames import MessageDelta
from conversation_service.websocket.router import SLOW_CONSUMER_REASON
from tests.integration.conversation_service.support import (
    Reader,
    connect,
    connect_not_reading,
    make_settings,
    new_conversation,
    running,
)

QUEUE_SIZE = 8
FRAME_TEXT = "x" * 16_000
BATCH = 32
# Far more than loopback kernel buffers can hold (a few MB): reaching this without the slow
# client being dropped is a failure, not a reason to keep going.
MAX_FRAMES = 4_000


async def emit(publisher, conversation_id: str, n: int) -> None:
    await publisher.emit(conversation_id, MessageDelta(f"n{n}", FRAME_TEXT))
    # Like every real producer (a model's stream, the agent's events), wait for the next piece:
    # here one loop turn, the least any producer awaits. In-process emits never suspend, so a
    # burst without it would fill even a fast client's socket before that client could read.
    await asyncio.sleep(0)


def slow_consumers(app) -> float:
    return app.state.metrics.registry.get_sample_value("conversation_ws_slow_consumers_total")


def open_connections(app) -> float:
    return app.state.metrics.registry.get_sample_value("conversation_ws_connections")


async def test_slow_client_is_dropped_and_resumes_while_the_fast_one_gets_everything(database_url: str) -> None:
    settings = make_settings(database_url, ws_client_queue_size=QUEUE_SIZE)
    assert settings.ws_client_queue_size == QUEUE_SIZE
    async with running(settings) as (base, app):
        publisher = app.state.realtime.publisher
        async with httpx.AsyncClient() as client:
            cid = (await new_conversation(client, base, "alice"))["id"]
        # after_seq=0: each client gets every frame of the conversation, however its subscription
        # races the first emits.
        fast = Reader(await connect(base, cid, "alice", after_seq=0))
        slow = await connect_not_reading(base, cid, "alice", after_seq=0)
        try:
            hub = app.state.realtime.hub
            async with asyncio.timeout(10):
                while hub.subscriber_count(cid) < 2:
                    await asyncio.sleep(0.01)
            published = 0
            while slow_consumers(app) == 0:
                assert published < MAX_FRAMES, "the client that does not read was never dropped"
                for _ in range(BATCH):
                    published += 1
                    await emit(publisher, cid, published)
                # The fast client keeps up batch by batch, while the other one has stopped reading.
                await fast.wait_for(published, timeout=10)
            dropped_after = published
            # A few more after the drop: the slow client must get these through its resume.
            for _ in range(BATCH):
                published += 1
                await emit(publisher, cid, published)
            await fast.wait_for(published, timeout=10)

            # The slow client reads again: what the server had sent before dropping it, then 1013.
            before_close: list[dict] = []
            with pytest.raises(ConnectionClosed) as closed:
                async with asyncio.timeout(20):
                    while True:
                        before_close.append(json.loads(await slow.recv()))
            assert closed.value.rcvd is not None, "closed without a close frame"
            assert closed.value.rcvd.code == WS_TRY_AGAIN_LATER
            assert closed.value.rcvd.reason == SLOW_CONSUMER_REASON
            # It really fell behind: it had not received everything when it was closed.
            assert 0 < len(before_close) < dropped_after
            seqs = [f["seq"] for f in before_close]
            assert seqs == list(range(1, len(seqs) + 1))
            last_seen = seqs[-1]

            resumed = Reader(await connect(base, cid, "alice", after_seq=last_seen))
            missed = published - len(before_close)
            await resumed.wait_for(missed, timeout=30)
            await resumed.close()

            # Only the slow one was dropped; the fast one is still connected and got everything.
            assert slow_consumers(app) == 1
            assert not fast.task.done()
            assert len(fast.frames) == published
        finally:
            await fast.close()
            await slow.close()

    assert [int(f["data"]["message_id"][1:]) for f in fast.frames] == list(range(1, published + 1))
    # Before the drop and after the resume: every frame exactly once, in order.
    assert before_close + resumed.frames == fast.frames


async def test_a_client_stalled_past_its_drop_still_reads_1013(database_url: str) -> None:
    settings = make_settings(database_url, ws_client_queue_size=QUEUE_SIZE)
    async with running(settings) as (base, app):
        publisher = app.state.realtime.publisher
        async with httpx.AsyncClient() as client:
            cid = (await new_conversation(client, base, "alice"))["id"]
        slow = await connect_not_reading(base, cid, "alice", after_seq=0)
        try:
            async with asyncio.timeout(10):
                while app.state.realtime.hub.subscriber_count(cid) < 1:
                    await asyncio.sleep(0.01)
            published = 0
            while slow_consumers(app) == 0:
                assert published < MAX_FRAMES, "the client that does not read was never dropped"
                published += 1
                await emit(publisher, cid, published)
            # The server is done with the client (its handler returned) while the client still
            # reads nothing: whatever close it wrote is in the socket by now.
            async with asyncio.timeout(10):
                while open_connections(app) > 0:
                    await asyncio.sleep(0.01)
            with pytest.raises(ConnectionClosed) as closed:
                async with asyncio.timeout(20):
                    while True:
                        await slow.recv()
            assert closed.value.rcvd is not None, "closed without a close frame (the client sees 1006)"
            assert closed.value.rcvd.code == WS_TRY_AGAIN_LATER
            assert closed.value.rcvd.reason == SLOW_CONSUMER_REASON
        finally:
            await slow.close()
