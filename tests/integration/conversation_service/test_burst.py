"""A burst of frames larger than a client's queue does not drop a client that is reading.

The publisher emits back to back without waiting on anyone (the agent path works through up to
``AGENT_EVENT_QUEUE_SIZE`` buffered events that way). Each frame is written to a reading client's
socket as it is published; a client's bounded queue (``WS_CLIENT_QUEUE_SIZE``) only fills while a
write to it waits, so a burst far larger than the queue must not close a reading client as a
slow consumer.
"""

from __future__ import annotations

import asyncio
import json

import httpx

from conversation_service.realtime.frames import FrameType, MessageDelta
from conversation_service.settings.delegation import DelegationSettings
from tests.integration.conversation_service.support import connect, make_settings, new_conversation, running

CLIENT_QUEUE = 8
BURST = 600  # far beyond the client queue, and beyond a full agent event queue
CLIENTS = 3


async def _read(ws, count: int) -> list[dict]:
    frames = []
    async with asyncio.timeout(30):
        while len(frames) < count:
            frame = json.loads(await ws.recv())
            if frame["type"] == FrameType.MESSAGE_DELTA:
                frames.append(frame)
    return frames


async def test_back_to_back_burst_reaches_reading_clients(database_url: str) -> None:
    settings = make_settings(database_url, ws_client_queue_size=CLIENT_QUEUE)
    assert BURST > DelegationSettings().agent_event_queue_size > CLIENT_QUEUE
    async with running(settings) as (base, app), httpx.AsyncClient() as client:
        conversation = (await new_conversation(client, base, "alice"))["id"]
        services = app.state
        sockets = [await connect(base, conversation, "alice") for _ in range(CLIENTS)]
        try:
            readers = [asyncio.create_task(_read(ws, BURST)) for ws in sockets]
            slow_before = _slow_consumers(services)
            for i in range(BURST):
                await services.realtime.publisher.emit(conversation, MessageDelta("m", str(i)))
            for frames in await asyncio.gather(*readers):
                assert [f["data"]["text"] for f in frames] == [str(i) for i in range(BURST)]
                seqs = [f["seq"] for f in frames]
                assert seqs == list(range(seqs[0], seqs[0] + BURST))
            assert _slow_consumers(services) == slow_before
            # Still open and served after the burst.
            for ws in sockets:
                await ws.send(json.dumps({"type": "ping", "data": {}}))
                assert json.loads(await asyncio.wait_for(ws.recv(), 10)) == {"type": "pong", "data": {}}
        finally:
            for ws in sockets:
                await ws.close()


def _slow_consumers(services) -> float:
    return services.metrics.registry.get_sample_value("conversation_ws_slow_consumers_total") or 0.0
