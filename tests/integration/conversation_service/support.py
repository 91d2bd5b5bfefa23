"""Shared helpers of the ConversationService integration tests: a real app on loopback."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from itertools import accumulate
from typing import Any
from urllib.parse import urlsplit

import httpx
import websockets

from conversation_service.app import create_app
from conversation_service.auth.tokens import issue_token
from conversation_service.db import migrate
from conversation_service.db.models import (
    Conversation,
    ConversationAgentSession,
    Message,
    Turn,
    TurnStatus,
    utcnow,
)
from conversation_service.realtime.frames import Frame, MessageDelta
from conversation_service.realtime.repository import FrameRepository
from conversation_service.settings import ConversationSettings
from conversation_service.websocket.protocol import server_options
from shared.db import create_engine, create_sessionmaker
from shared.transactions import transaction
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


@asynccontextmanager
async def running_with_conversation(
    settings: ConversationSettings, user: str = "alice",
) -> AsyncIterator[tuple[str, Any, str]]:
    """``running``, with a new conversation of ``user``: the base URL, the app, the conversation's id."""
    async with running(settings) as (base, app):
        async with httpx.AsyncClient() as client:
            conversation = await new_conversation(client, base, user)
        yield base, app, conversation["id"]


def ws_url(base: str, conversation_id: str, after_seq: int | None = None, *, batch: bool = False) -> str:
    url = base.replace("http://", "ws://") + f"/conversations/{conversation_id}/ws"
    query = ([f"after_seq={after_seq}"] if after_seq is not None else []) + (["batch=1"] if batch else [])
    return f"{url}?{'&'.join(query)}" if query else url


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


async def connect_not_reading(
    base: str, conversation_id: str, user: str, after_seq: int | None = None, *, batch: bool = False,
):
    """A WebSocket client that takes (almost) nothing off the wire until the test reads from it."""
    parts = urlsplit(base)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Set before connecting, so the TCP window it advertises stays small.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (parts.hostname, parts.port))
    return await websockets.connect(
        ws_url(base, conversation_id, after_seq, batch=batch), sock=sock, additional_headers=auth(user), max_queue=1,
        # Uncompressed, so each frame really takes its size in the buffers between the two ends.
        compression=None,
    )


class Reader:
    """Reads a WebSocket continuously in a task and lets the test wait for a number of frames, or for
    one that matches; ``received_at`` holds when each frame arrived (``time.monotonic()``)."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.frames: list[dict] = []
        self.received_at: list[float] = []
        self._changed = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for raw in self.ws:
            self.frames.append(json.loads(raw))
            self.received_at.append(time.monotonic())
            self._changed.set()

    async def first(self, matches, timeout: float = 10.0) -> dict:
        """The first frame ``matches`` accepts, once it has arrived."""
        async with asyncio.timeout(timeout):
            while not any(matches(f) for f in self.frames):
                if self.task.done():
                    self.task.result()
                    raise AssertionError(f"connection ended after {len(self.frames)} frames")
                self._changed.clear()
                await self._changed.wait()
        return next(f for f in self.frames if matches(f))

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


PING = json.dumps({"type": "ping", "data": {}})
PONG = {"type": "pong", "data": {}}
FRAME_TEXT = "x" * 16_000
# Far more than loopback kernel buffers can hold: a stuck client's socket fills long before.
MAX_FRAMES = 4_000


def sample(app, name: str) -> float:
    return app.state.metrics.registry.get_sample_value(name) or 0.0


def capture_connections(hub) -> list:
    """The hub's subscribers as they subscribe: the server's ``ClientConnection`` of each client."""
    connections: list = []
    subscribe = hub.subscribe

    def recording(conversation_id: str, subscriber):
        connections.append(subscriber)
        return subscribe(conversation_id, subscriber)

    hub.subscribe = recording
    return connections


@asynccontextmanager
async def reader_and_stuck_client(base: str, app, cid: str, *, batch: bool = False):
    """Two clients of ``cid`` (user alice): ``fast`` reads all the time, ``stuck`` takes nothing off
    the wire until the test reads from it (``connect_not_reading``, with ``?batch=1`` if ``batch``).
    Yields both with the server's connection of each. Both answered a ping, so both connections have
    started sending: the pong is the one frame each has taken in (``stuck`` until the test reads
    again)."""
    connections = capture_connections(app.state.realtime.hub)
    fast = Reader(await connect(base, cid, "alice"))
    stuck = await connect_not_reading(base, cid, "alice", batch=batch)
    try:
        fast_conn, stuck_conn = connections
        await stuck.send(PING)
        assert json.loads(await asyncio.wait_for(stuck.recv(), 10)) == PONG
        await fast.ws.send(PING)
        await fast.wait_for(1, timeout=10)
        yield fast, stuck, fast_conn, stuck_conn
    finally:
        await fast.close()
        await stuck.close()


async def publish_until_write_waits(publisher, cid: str, fast: Reader, fast_conn, stuck_conn) -> int:
    """Publish 16 KB deltas (n = 1, 2 ... in a new conversation, so n is the seq) until the write to
    ``stuck_conn``, whose client does not read, has to wait; ``fast`` (which had its pong) gets each
    one inside its publish. Returns the n of that last frame."""
    published = 0
    while True:
        assert published < MAX_FRAMES, "the write to the client that does not read never blocked"
        published += 1
        frame = await publisher.emit(cid, MessageDelta(f"n{published}", FRAME_TEXT))
        assert frame.seq == published and fast_conn.last_sent == frame.seq
        if stuck_conn.last_sent < frame.seq:
            return published
        await fast.wait_for(1 + published, timeout=10)


# -- a replica that died mid-turn, and the one that takes its turn over -----------------------------


@dataclass(frozen=True)
class FollowedTask:
    """The A2A task a turn was following."""

    agent: str
    task_id: str
    context_id: str


async def died_mid_turn(database_url: str, *, kind: str | None, reply: tuple[str, str] | None, deltas: list[str],
                        text: str = "hello", task: FollowedTask | None = None) -> dict[str, str]:
    """What a replica that died mid-turn leaves: the user message (``text``), its expired turn, maybe the
    reply row (status, content) and the frames of the reply it had stored; with ``task``, the agent
    session of the A2A task the turn followed, whose events up to the last delta stored were shown."""
    engine = create_engine(database_url)
    await migrate.upgrade(engine)
    try:
        async with transaction(create_sessionmaker(engine)) as session:
            conversation = Conversation(owner_id="alice", org_id="acme", title="t")
            session.add(conversation)
            await session.flush()
            user = Message(conversation_id=conversation.id, role="user", content=text)
            session.add(user)
            await session.flush()
            ids = {"cid": conversation.id, "user": user.id}
            frames = [Frame("message.created", 1, conversation.id, {"id": user.id, "role": "user"})]
            turn = Turn(id=user.id, conversation_id=conversation.id, kind=kind, status=TurnStatus.RUNNING.value,
                        owner_id="replica-dead", lease_expires_at=utcnow() - timedelta(seconds=1))
            metadata = {"path": "direct_llm", "in_reply_to": user.id}
            if task is not None:
                row = ConversationAgentSession(conversation_id=conversation.id, agent_session_id=task.context_id,
                                               status="ACTIVE", agent_name=task.agent, a2a_task_id=task.task_id)
                session.add(row)
                await session.flush()
                turn.agent_session_id, turn.agent_session_row_id = task.context_id, row.id
                turn.last_agent_seq = len(deltas)
                metadata = {"path": "agent", "in_reply_to": user.id, "agent": task.agent}
            if reply is not None:
                assistant = Message(conversation_id=conversation.id, role="assistant", status=reply[0],
                                    content=reply[1], agent_session_id=task.context_id if task else None,
                                    agent_metadata=metadata)
                session.add(assistant)
                await session.flush()
                ids["reply"] = turn.assistant_message_id = assistant.id
                frames.append(Frame("message.created", 2, conversation.id, {"id": assistant.id, "role": "assistant"}))
                frames += [Frame("message.delta", 3 + i, conversation.id,
                                 {"message_id": assistant.id, "text": delta, "offset": offset})
                           for i, (delta, offset) in enumerate(zip(deltas, accumulate(map(len, deltas), initial=0)))]
            session.add(turn)
            await FrameRepository(session).insert_many(frames)
            conversation.seq_reserved = 100  # the dead replica's block: seqs it may have shown live
        return ids
    finally:
        await engine.dispose()


@asynccontextmanager
async def taking_over(
    database_url: str, ids: dict[str, str], until, **settings: Any,
) -> AsyncIterator[tuple[Any, list[dict]]]:
    """A replica on the dead one's database (``died_mid_turn``), its sweep quick to find the expired
    turn: its app, and the conversation's frames from the first to the one ``until`` accepts."""
    settings = make_settings(database_url, turn_lease_s=2.0, turn_sweep_interval_s=0.2, **settings)
    async with running(settings) as (base, app):
        ws = await connect(base, ids["cid"], "alice", after_seq=0)
        frames = await collect_until(ws, until, timeout=20.0)
        await ws.close()
        yield app, frames


async def turn_and_reply(app, ids: dict[str, str]) -> tuple[Turn, Message | None]:
    """The turn and its reply (None: ``died_mid_turn`` made none) as they are stored now."""
    async with transaction(app.state.storage.sessionmaker) as session:
        reply = await session.get(Message, ids["reply"]) if "reply" in ids else None
        return await session.get(Turn, ids["user"]), reply
