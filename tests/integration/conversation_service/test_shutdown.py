"""SIGTERM on a real ``python -m conversation_service`` process (docs/operations.md, "Restarts and
graceful shutdown").

The service stops accepting, closes every WebSocket with 1012 and a reason saying how to resume,
lets a reply under way finish within ``SHUTDOWN_GRACE_S`` (or cuts it off when the grace period is
over), and exits 0. A client that reconnects with ``after_seq`` to the restarted service gets what
it missed, exactly once.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest
import websockets
from websockets.exceptions import ConnectionClosed

from conversation_service.realtime.frames import FrameType
from conversation_service.websocket.protocol import RESTART_REASON, WS_SERVICE_RESTART
from tests.integration.conversation_service.support import (
    SECRET,
    auth,
    collect_until,
    new_conversation,
    ws_url,
)
from tests.support.servers import ServiceProcess, free_port

# Start-up and the interpreter's own exit, on a busy two-core machine: beyond the grace period.
EXIT_MARGIN_S = 4.0


def chat_process(database_url: str, grace_s: float, chunk_delay_ms: int = 0, port: int | None = None) -> ServiceProcess:
    return ServiceProcess("conversation_service", {
        "CONVERSATION_DATABASE_URL": database_url, "AUTH_JWT_SECRET": SECRET, "MIGRATE_ON_START": "true",
        "SHUTDOWN_GRACE_S": str(grace_s), "REDIS_URL": "", "AGENT_SERVICE_API_KEY": "",
        "LLM_BUILTIN_FIRST_TOKEN_MS": "0", "LLM_BUILTIN_CHUNK_DELAY_MS": str(chunk_delay_ms),
    }, port=port)


async def live_socket(base: str, conversation_id: str, after_seq: int | None = None):
    """A connected client whose subscription is live (it answered a ping)."""
    ws = await websockets.connect(ws_url(base, conversation_id, after_seq), additional_headers=auth("alice"))
    await ws.send('{"type": "ping"}')
    frames = await collect_until(ws, lambda f: f["type"] == "pong")
    return ws, [f for f in frames if "seq" in f]


async def close_of(ws, frames: list[dict] | None = None, timeout: float = 10.0):
    """Read until the server closes; the close frame it sent (None: no close frame, 1006)."""
    with pytest.raises(ConnectionClosed) as closed:
        async with asyncio.timeout(timeout):
            while True:
                frame = json.loads(await ws.recv())
                if frames is not None and "seq" in frame:
                    frames.append(frame)
    return closed.value.rcvd


async def sigterm(service: ServiceProcess) -> float:
    assert service.proc is not None
    service.proc.terminate()
    return time.monotonic()


async def test_sigterm_closes_every_websocket_with_1012_and_exits_0(database_url: str, tmp_path: Path) -> None:
    grace = 3.0
    service = chat_process(database_url, grace)
    await service.start(tmp_path)
    try:
        async with httpx.AsyncClient() as http:
            cid = (await new_conversation(http, service.url, "alice"))["id"]
        clients = [(await live_socket(service.url, cid))[0] for _ in range(2)]
        stopped_at = await sigterm(service)
        for ws in clients:
            close = await close_of(ws)
            assert close is not None, "closed without a close frame (1006)"
            assert (close.code, close.reason) == (WS_SERVICE_RESTART, RESTART_REASON)
        code = await service.wait_exit(grace + EXIT_MARGIN_S)
        assert code == 0, f"exit {code} after {time.monotonic() - stopped_at:.1f} s:\n{service.logs()[-3000:]}"
        # It no longer accepts: nothing listens on its port.
        with pytest.raises(httpx.ConnectError):
            async with httpx.AsyncClient() as http:
                await http.get(f"{service.url}/health")
    finally:
        await service.stop(kill=True)


async def test_a_reply_under_way_finishes_within_the_grace_period_and_a_reconnect_catches_up(
    database_url: str, tmp_path: Path,
) -> None:
    # About 0.1 s a word: the reply is still streaming when SIGTERM comes, and ends well within the grace.
    grace = 30.0
    port = free_port()
    service = chat_process(database_url, grace, chunk_delay_ms=100, port=port)
    await service.start(tmp_path)
    try:
        async with httpx.AsyncClient() as http:
            cid = (await new_conversation(http, service.url, "alice"))["id"]
            ws, _ = await live_socket(service.url, cid, after_seq=0)
            r = await http.post(f"{service.url}/conversations/{cid}/messages",
                                json={"content": "tell me about the weather"}, headers=auth("alice"))
            assert r.status_code == 202, r.text
        seen = await collect_until(ws, lambda f: f["type"] == FrameType.MESSAGE_DELTA)
        stopped_at = await sigterm(service)
        close = await close_of(ws, seen)
        assert close is not None and close.code == WS_SERVICE_RESTART
        assert not any(f["type"] == FrameType.MESSAGE_COMPLETED for f in seen), "the reply ended before SIGTERM"
        code = await service.wait_exit(grace + EXIT_MARGIN_S)
        assert code == 0, f"exit {code}:\n{service.logs()[-3000:]}"
        assert time.monotonic() - stopped_at < grace, "it waited the whole grace period for a reply that had ended"

        restarted = chat_process(database_url, grace, port=port)
        await restarted.start(tmp_path)
        try:
            async with httpx.AsyncClient() as http:
                items = (await http.get(f"{restarted.url}/conversations/{cid}/messages", headers=auth("alice"))).json()["items"]
            reply = [m for m in items if m["role"] == "assistant"]
            assert [m["status"] for m in reply] == ["complete"], reply
            # The page's reconnect: after_seq = the last seq it saw; it gets the rest, each seq once.
            last_seq = seen[-1]["seq"]
            resumed = await websockets.connect(ws_url(restarted.url, cid, last_seq), additional_headers=auth("alice"))
            rest = await collect_until(resumed, lambda f: f["type"] == FrameType.MESSAGE_COMPLETED)
            await resumed.close()
            seqs = [f["seq"] for f in seen + rest]
            assert seqs == list(range(1, len(seqs) + 1))
            text = "".join(f["data"]["text"] for f in seen + rest if f["type"] == FrameType.MESSAGE_DELTA)
            assert text == reply[0]["content"]
        finally:
            await restarted.stop()
    finally:
        await service.stop(kill=True)


async def test_a_reply_longer_than_the_grace_period_is_cut_off_on_time(database_url: str, tmp_path: Path) -> None:
    grace = 1.0
    service = chat_process(database_url, grace, chunk_delay_ms=2000)  # a reply of a minute or more
    await service.start(tmp_path)
    try:
        async with httpx.AsyncClient() as http:
            cid = (await new_conversation(http, service.url, "alice"))["id"]
            ws, _ = await live_socket(service.url, cid, after_seq=0)
            r = await http.post(f"{service.url}/conversations/{cid}/messages",
                                json={"content": "tell me about the weather"}, headers=auth("alice"))
            assert r.status_code == 202, r.text
        await collect_until(ws, lambda f: f["type"] == FrameType.MESSAGE_DELTA)
        stopped_at = await sigterm(service)
        assert (await close_of(ws)).code == WS_SERVICE_RESTART
        code = await service.wait_exit(grace + EXIT_MARGIN_S)
        assert code == 0, f"exit {code} after {time.monotonic() - stopped_at:.1f} s:\n{service.logs()[-3000:]}"
    finally:
        await service.stop(kill=True)
