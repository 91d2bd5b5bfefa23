"""``?batch=1``: frames that waited for a client go out together, in one ``batch`` message.

Real server, real sockets: the client that falls behind really stops reading
(``connect_not_reading``); a client that keeps up still gets each frame alone.
"""

from __future__ import annotations

import asyncio
import json

import websockets

from conversation_service.realtime.frames import FrameType, MessageDelta
from tests.integration.conversation_service.support import (
    auth,
    make_settings,
    publish_until_write_waits,
    reader_and_stuck_client,
    recv_frame,
    running_with_conversation,
    sample,
    ws_url,
)

QUEUED = 5


async def test_frames_queued_behind_a_blocked_write_go_out_in_one_batch(database_url: str) -> None:
    settings = make_settings(database_url, ws_client_queue_size=QUEUED + 5)
    async with running_with_conversation(settings) as (base, app, cid):
        publisher = app.state.realtime.publisher
        # Only the client that does not read asks for batches.
        async with reader_and_stuck_client(base, app, cid, batch=True) as (fast, slow, fast_conn, slow_conn):
            blocked_at = await publish_until_write_waits(publisher, cid, fast, fast_conn, slow_conn)
            sent_before = sample(app, "conversation_ws_frames_sent_total")
            for n in range(blocked_at + 1, blocked_at + QUEUED + 1):
                await publisher.emit(cid, MessageDelta(f"n{n}", "queued"))

            # The slow client reads again: every frame before the blocked one alone, the blocked
            # one alone (its write had started), then the queued ones in one message.
            messages = []
            async with asyncio.timeout(20):
                while not (messages and messages[-1].get("type") == "batch"):
                    messages.append(json.loads(await slow.recv()))
            singles, batch = messages[:-1], messages[-1]
            assert [int(f["data"]["message_id"][1:]) for f in singles] == list(range(1, blocked_at + 1))
            assert [f["seq"] for f in batch["frames"]] == list(range(blocked_at + 1, blocked_at + QUEUED + 1))
            assert all(f["type"] == FrameType.MESSAGE_DELTA and f["conversation_id"] == cid for f in batch["frames"])
            assert slow_conn.last_sent == blocked_at + QUEUED
            # The fast client had each frame alone, at once; frames are counted one by one.
            await fast.wait_for(1 + blocked_at + QUEUED, timeout=10)
            assert all("seq" in f and f["type"] != "batch" for f in fast.frames[1:])
            assert sample(app, "conversation_ws_frames_sent_total") == sent_before + 2 * QUEUED + 1  # and the blocked write, done once read


async def test_a_replay_goes_out_in_batches_and_live_frames_follow_each_once(database_url: str) -> None:
    history = 700  # more than one replay page (500)
    async with running_with_conversation(make_settings(database_url)) as (base, app, cid):
        publisher = app.state.realtime.publisher
        for n in range(1, history + 1):
            await publisher.emit(cid, MessageDelta(f"n{n}", "h"))
        await app.state.realtime.writer.flush()
        ws = await websockets.connect(ws_url(base, cid, after_seq=0, batch=True), additional_headers=auth("alice"))
        try:
            first, second = await recv_frame(ws), await recv_frame(ws)
            assert first["type"] == second["type"] == "batch"
            assert [f["seq"] for f in first["frames"] + second["frames"]] == list(range(1, history + 1))
            live = await publisher.emit(cid, MessageDelta(f"n{history + 1}", "live"))
            assert await recv_frame(ws) == live.to_dict()
        finally:
            await ws.close()


async def test_a_bad_batch_value_is_refused(database_url: str) -> None:
    async with running_with_conversation(make_settings(database_url)) as (base, _app, cid):
        url = ws_url(base, cid) + "?batch=yes"
        try:
            async with websockets.connect(url, additional_headers=auth("alice")) as ws:
                await ws.recv()
            raise AssertionError("the connection was accepted")
        except websockets.exceptions.InvalidStatus as refused:
            assert refused.response.status_code == 403
        except websockets.exceptions.ConnectionClosed as closed:
            assert closed.rcvd is not None and closed.rcvd.code == 1008
