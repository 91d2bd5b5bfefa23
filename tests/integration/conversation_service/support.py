"""Shared helpers of the ConversationService integration tests: a real app on loopback."""

from __future__ import annotations

import asyncio
import json
import socket
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator
from urllib.parse import urlsplit

import httpx
import websockets

from conversation_service.app import create_app
from conversation_service.auth.tokens import issue_token
from conversation_service.settings import ConversationSettings
from conversation_service.websocket.protocol import server_options
from tests.support.servers import serve_app

SECRET = "test-secret-for-the-conversation-service-0123456789"


def make_settings(database_url: str, **overrides: Any) -> ConversationSettings:
    values: dict[str, Any] = {
        "conversation_database_url": database_url,
        "auth_jwt_secret": SECRET,
        "migrate_on_start": True,
        "redis_url": None,
    }
    values.update(overrides)
    return ConversationSettings(**values)


def token(user: str, org: str | None = "acme", ttl_s: int = 600) -> str:
    return issue_token(SECRET, user, org, ttl_s=ttl_s)


def auth(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(user)}"}


@asynccontextmanager
async def running(settings: ConversationSettings) -> AsyncIterator[tuple[str, Any]]:
    app = create_app(settings)
    async with serve_app(app, **server_options(settings)) as url:
        yield url, app


def ws_url(base: str, conversation_id: str, after_seq: int | None = None) -> str:
    url = base.replace("http://", "ws://") + f"/conversations/{conversation_id}/ws"
    return url if after_seq is None else f"{url}?after_seq={after_seq}"


async def connect(base: str, conversation_id: str, user: str, after_seq: int | None = None, **kw: Any):
    return await websockets.connect(
        ws_url(base, conversation_id, after_seq), additional_headers=auth(user), **kw
    )


async def recv_frame(ws, timeout: float = 10.0) -> dict:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


async def collect_until(ws, predicate, timeout: float = 15.0) -> list[dict]:
    """Frames until (and including) the first one matching ``predicate``."""
    frames: list[dict] = []
    async with asyncio.timeout(timeout):
        while True:
            frame = json.loads(await ws.recv())
            frames.append(frame)
            if predicate(frame):
                return frames


async def new_conversation(client: httpx.AsyncClient, base: str, user: str, title: str = "t") -> dict:
    r = await client.post(f"{base}/conversations", json={"title": title}, headers=auth(user))
    assert r.status_code == 201, r.text
    return r.json()


async def connect_not_reading(base: str, conversation_id: str, user: str, after_seq: int | None = None):
    """A WebSocket client that takes (almost) nothing off the wire until the test reads from it."""
    parts = urlsplit(base)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Set before connecting, so the TCP window it advertises stays small.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (parts.hostname, parts.port))
    return await websockets.connect(
        ws_url(base, conversation_id, after_seq), sock=sock, additional_headers=auth(user), max_queue=1,
        # Uncompressed, so each frame really takes its size in the buffers between the two ends.
        compression=None,
    )


class Reader:
    """Reads a WebSocket continuously in a task and lets the test wait for a number of frames."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.frames: list[dict] = []
        self._changed = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for raw in self.ws:
            self.frames.append(json.loads(raw))
            self._changed.set()

    async def wait_for(self, count: int, timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while len(self.frames) < count:
                if self.task.done():
                    self.task.result()
                    raise AssertionError(f"connection ended after {len(self.frames)} frames")
                self._changed.clear()
                await self._changed.wait()

    async def close(self) -> None:
        await self.ws.close()
        await asyncio.gather(self.task, return_exceptions=True)
