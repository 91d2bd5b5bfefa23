"""The load client of ``bench_capacity``: many paced streams per process at little CPU.

Each stream is an ``asyncio.Protocol`` reading raw bytes from its own socket: a tiny HTTP/1.1
chunked decoder and SSE splitter for the Agent Service, a tiny RFC 6455 frame reader for the
ConversationService's WebSocket. No HTTP library sits on the per-event path: at 500 streams of 50
events/s the client reads 25,000 events a second, and it must not be what limits the measure.

A token's latency is its receive time (``time.time()`` when the bytes holding it were read) minus
the time the fake model wrote in its text (``t<time.time()>``, ``--stamp``); both clocks are the
same host's. Each stream also records when it got its first event, and every event's and answer's
arrival (``activity``), from which ``bench_burst`` finds the longest time nothing arrived on any
stream. ``run_level`` drives one process's share of a level; ``worker`` runs it in a child process for
the benchmark, which merges the shares.
"""

from __future__ import annotations

import asyncio
import base64
import multiprocessing
import os
import re
import time
from abc import ABC, abstractmethod
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import psutil

STAMP = re.compile(rb"t(\d{9,11}\.\d{6})")
AGENT_BODY = {"profile_name": "default", "message": "Tell me something.",
              "user_context": {"user_id": "bench", "org_id": "bench", "permissions": []}}
CHAT_MESSAGE = "/agent tell me something"  # the /agent prefix routes to the agent whatever the words


@dataclass
class Share:
    """One process's samples of a level; the benchmark adds the shares of its client processes."""

    streams: int = 0
    completed: int = 0
    events: int = 0  # agent: SSE events; chat: WebSocket frames
    latencies: array = field(default_factory=lambda: array("d"))  # per token, seconds
    first_token: array = field(default_factory=lambda: array("d"))  # the latency of each stream's first token
    model_rates: array = field(default_factory=lambda: array("d"))  # per stream: tokens/s between its stamps
    first_answer: array = field(default_factory=lambda: array("d"))  # request sent -> first answer text
    first_event: array = field(default_factory=lambda: array("d"))  # request sent -> first event or frame
    # time.time() of every event or frame read and of every answer that ended a stream (a 503 too)
    activity: array = field(default_factory=lambda: array("d"))
    errors: Counter = field(default_factory=Counter)
    ended: float = 0.0  # time.time() when the level's last stream ended or was given up

    def merge(self, other: Share) -> None:
        self.streams += other.streams
        self.completed += other.completed
        self.events += other.events
        self.latencies.extend(other.latencies)
        self.first_token.extend(other.first_token)
        self.model_rates.extend(other.model_rates)
        self.first_answer.extend(other.first_answer)
        self.first_event.extend(other.first_event)
        self.activity.extend(other.activity)
        self.errors.update(other.errors)
        self.ended = max(self.ended, other.ended)


class _Stream(asyncio.Protocol, ABC):
    """The part of a stream both targets share: the socket, the HTTP response head, the outcome."""

    def __init__(self, share: Share, tokens: int) -> None:
        self.share = share
        self.tokens = tokens
        self.transport: asyncio.Transport | None = None
        self.head: bytes | None = None
        self.buf = b""
        self.sent_at = 0.0
        self.first = False
        self.first_seen = False
        self.stamps = 0
        self.first_stamp = self.last_stamp = 0.0
        self.counting = False
        loop = asyncio.get_running_loop()
        self.connected = loop.create_future()
        self.done = loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.connected.done():
            self.connected.set_exception(ConnectionError(f"closed before the response head: {exc}"))
        self.finish("connection lost before the end of the stream")

    def finish(self, error: str | None) -> None:
        if self.done.done():
            return
        if error is None and self.stamps < self.tokens:
            error = f"{self.stamps} of {self.tokens} stamped tokens arrived"
        if error is None:
            self.share.completed += 1
            if self.stamps > 1 and self.last_stamp > self.first_stamp:
                self.share.model_rates.append((self.stamps - 1) / (self.last_stamp - self.first_stamp))
        else:
            self.share.errors[error] += 1
        self.done.set_result(None)
        self.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def event(self, now: float) -> None:
        """An event (SSE) or a frame (WebSocket) of the stream arrived at ``now``."""
        self.share.events += 1
        self.share.activity.append(now)
        if not self.first_seen:
            self.first_seen = True
            self.share.first_event.append(now - self.sent_at)

    def refused(self, status: str, retry_after: bool, now: float) -> None:
        """Answered ``status`` instead of a stream: a 503 tells when to retry or it is a bare error."""
        self.share.activity.append(now)
        if status == "503":
            self.finish(f"HTTP 503 {'with' if retry_after else 'without'} Retry-After")
        else:
            self.finish(f"HTTP {status}")

    def answer(self, text: bytes, now: float) -> None:
        """Text of the answer arrived at ``now``: one latency per stamp in it."""
        if not self.first:
            self.first = True
            self.share.first_answer.append(now - self.sent_at)
        for raw in STAMP.findall(text):
            stamp = float(raw)
            self.share.latencies.append(now - stamp)
            if not self.stamps:
                self.first_stamp = stamp
                self.share.first_token.append(now - stamp)
            self.last_stamp = stamp
            self.stamps += 1

    def data_received(self, data: bytes) -> None:
        now = time.time()
        if self.head is None:
            self.buf += data
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            self.head, data, self.buf = self.buf[:end], self.buf[end + 4:], b""
            status = self.head.split(b" ", 2)[1]
            if not self.on_head(status, now):
                return
        if data:
            self.on_body(data, now)

    @abstractmethod
    def on_head(self, status: bytes, now: float) -> bool:
        """The response head arrived with ``status`` at ``now``: whether to read its body."""

    @abstractmethod
    def on_body(self, data: bytes, now: float) -> None:
        """Bytes of the body arrived at ``now``."""


class SSEStream(_Stream):
    """``POST /api/v1/agent/execute`` read to its terminal event: every SSE event counts, the
    ANSWER_CHUNK events carry the stamps."""

    def __init__(self, share: Share, tokens: int, request: bytes) -> None:
        super().__init__(share, tokens)
        self.request = request
        self.chunked = b""
        self.events = b""

    def send(self) -> None:
        assert self.transport is not None
        self.sent_at = time.time()
        self.transport.write(self.request)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.connected.set_result(None)

    def on_head(self, status: bytes, now: float) -> bool:
        if status != b"200":
            assert self.head is not None
            self.refused(status.decode(), b"\r\nretry-after:" in self.head.lower(), now)
            return False
        if b"chunked" not in self.head.lower():
            self.finish("response is not chunked")
            return False
        return True

    def on_body(self, data: bytes, now: float) -> None:
        # HTTP/1.1 chunked transfer coding: "<hex size>\r\n<payload>\r\n" ..., "0\r\n\r\n" at the end.
        buf = self.chunked + data
        pos = 0
        payload = []
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            size = int(buf[pos:eol].split(b";", 1)[0], 16)
            if size == 0:
                self._events(b"".join(payload), now)
                self.finish("the stream ended without a terminal event")
                return
            if len(buf) < eol + 2 + size + 2:
                break
            payload.append(buf[eol + 2:eol + 2 + size])
            pos = eol + 2 + size + 2
        self.chunked = buf[pos:]
        self._events(b"".join(payload), now)

    def _events(self, payload: bytes, now: float) -> None:
        if not payload:
            return
        blocks = (self.events + payload).split(b"\n\n")
        self.events = blocks.pop()  # an event not yet ended by its blank line
        for block in blocks:
            if b"data:" not in block:
                continue  # a comment (heartbeat) or a lone retry: not an event
            self.event(now)
            if b"event: ANSWER_CHUNK\n" in block:
                self.answer(block, now)
            elif b"event: COMPLETE\n" in block:
                self.finish(None)
            elif b"event: ERROR\n" in block:
                self.finish(f"ERROR {_error_code(block)}")
            elif b"event: ASK_USER\n" in block:
                self.finish("ASK_USER event")


class WebSocketStream(_Stream):
    """A conversation's WebSocket: every frame counts, ``message.delta`` frames carry the stamps,
    ``agent.complete`` ends the turn."""

    def __init__(self, share: Share, tokens: int, handshake: bytes) -> None:
        super().__init__(share, tokens)
        self.handshake = handshake
        self.fragments = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        transport.write(self.handshake)  # type: ignore[attr-defined]

    def on_head(self, status: bytes, now: float) -> bool:
        if status != b"101":
            self.connected.set_exception(ConnectionError(f"WebSocket upgrade answered {status.decode()}"))
            self.finish(f"WebSocket upgrade answered {status.decode()}")
            return False
        self.connected.set_result(None)
        return True

    def on_body(self, data: bytes, now: float) -> None:
        buf = self.buf + data
        pos, end = 0, len(buf)
        while end - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            length, at = b1 & 0x7F, pos + 2
            if length == 126:
                if end - at < 2:
                    break
                length, at = int.from_bytes(buf[at:at + 2], "big"), at + 2
            elif length == 127:
                if end - at < 8:
                    break
                length, at = int.from_bytes(buf[at:at + 8], "big"), at + 8
            if end - at < length:
                break
            self._frame(b0 & 0x80, b0 & 0x0F, buf[at:at + length], now)  # server frames are not masked
            pos = at + length
        self.buf = buf[pos:]

    def _frame(self, fin: int, opcode: int, payload: bytes, now: float) -> None:
        if opcode == 0x9:  # ping: answer, or the server drops a quiet client
            self._write(0xA, payload)
            return
        if opcode == 0x8:
            self.finish("the server closed the WebSocket")
            return
        if opcode in (0x1, 0x0):
            self.fragments += payload
            if not fin:
                return
            text, self.fragments = self.fragments, b""
            if not self.counting:
                return  # frames of the connection's set-up, before the turn
            self.event(now)
            frame = orjson.loads(text)
            kind = frame.get("type")
            if kind == "message.delta":
                self.answer(frame["data"]["text"].encode(), now)
            elif kind == "agent.complete":
                self.finish(None)
            elif kind in ("message.error", "agent.error", "notice"):
                self.finish(f"{kind} {(frame.get('data') or {}).get('code')}")

    def _write(self, opcode: int, payload: bytes) -> None:
        # Client frames are masked (RFC 6455 5.3); control payloads are short.
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        assert self.transport is not None
        self.transport.write(bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked)

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self._write(0x8, (1000).to_bytes(2, "big"))
            self.transport.close()


def _error_code(block: bytes) -> str:
    """The ``code`` of an SSE ERROR event's envelope."""
    for line in block.split(b"\n"):
        if line.startswith(b"data:"):
            return str((orjson.loads(line[5:]).get("data") or {}).get("code"))
    return "?"


def _request(method: str, url: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    parts = urlsplit(url)
    lines = [f"{method} {parts.path} HTTP/1.1", f"Host: {parts.netloc}",
             *(f"{k}: {v}" for k, v in headers.items())]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _connect(url: str, protocol: _Stream) -> None:
    parts = urlsplit(url)
    await asyncio.get_running_loop().create_connection(lambda: protocol, parts.hostname, parts.port)


# --- one process's share of a level ------------------------------------------------------------


@dataclass
class LevelSpec:
    target: str  # "agent" or "chat"
    streams: int
    tokens: int
    timeout_s: float
    agent_url: str
    agent_key: str
    chat_url: str = ""
    jwt_secret: str = ""
    name: str = "c0"  # distinguishes users across client processes and levels


async def _prepare_agent(spec: LevelSpec, share: Share) -> tuple[list[SSEStream], Any]:
    body = orjson.dumps(AGENT_BODY)
    request = _request("POST", f"{spec.agent_url}/api/v1/agent/execute", {
        "X-API-Key": spec.agent_key, "Content-Type": "application/json", "Accept": "text/event-stream",
        "Connection": "close"}, body)
    streams = [SSEStream(share, spec.tokens, request) for _ in range(spec.streams)]
    await asyncio.gather(*(_connect(spec.agent_url, s) for s in streams))

    async def go() -> None:
        for stream in streams:
            stream.counting = True
            stream.send()

    return streams, go


async def _prepare_chat(spec: LevelSpec, share: Share, http: httpx.AsyncClient) -> tuple[list[WebSocketStream], Any]:
    from conversation_service.auth.tokens import issue_token

    convs = []

    async def open_one(i: int) -> WebSocketStream:
        token = issue_token(spec.jwt_secret, f"cap-{spec.name}-{i}", "bench", ttl_s=3600)
        headers = {"Authorization": f"Bearer {token}"}
        r = await http.post(f"{spec.chat_url}/conversations", json={"title": "capacity"}, headers=headers)
        r.raise_for_status()
        cid = r.json()["id"]
        key = base64.b64encode(os.urandom(16)).decode()
        handshake = _request("GET", f"{spec.chat_url}/conversations/{cid}/ws", {
            **headers, "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": key,
            "Sec-WebSocket-Version": "13"})
        stream = WebSocketStream(share, spec.tokens, handshake)
        await _connect(spec.chat_url, stream)
        await stream.connected
        convs.append((cid, headers, stream))
        return stream

    # Set-up in small groups: it is not what is measured, and a burst of 500 sign-ups is no chat.
    streams: list[WebSocketStream] = []
    for start in range(0, spec.streams, 25):
        streams += await asyncio.gather(*(open_one(i) for i in range(start, min(start + 25, spec.streams))))

    async def post(cid: str, headers: dict[str, str], stream: WebSocketStream) -> None:
        stream.counting = True
        stream.sent_at = time.time()
        try:
            r = await http.post(f"{spec.chat_url}/conversations/{cid}/messages", json={"content": CHAT_MESSAGE},
                                headers=headers)
        except httpx.HTTPError as exc:
            stream.finish(f"post message: {type(exc).__name__}")
            return
        if r.status_code != 202:
            stream.share.activity.append(time.time())
            retry = " with Retry-After" if r.status_code == 503 and "retry-after" in r.headers else ""
            stream.finish(f"post message: HTTP {r.status_code}{retry}")
        elif r.json()["route"]["target"] not in ("agent", "pending"):  # pending: queued for a place, then routed
            stream.finish(f"routed to {r.json()['route']['target']}")

    async def go() -> None:
        await asyncio.gather(*(post(cid, headers, stream) for cid, headers, stream in convs))

    return streams, go


async def run_level(spec: LevelSpec, ready, wait_go) -> Share:
    """Set the streams up, call ``ready()``, wait for ``wait_go()``, start them all, collect."""
    share = Share(streams=spec.streams)
    limits = httpx.Limits(max_connections=min(spec.streams, 100) + 10)
    async with httpx.AsyncClient(timeout=httpx.Timeout(spec.timeout_s), limits=limits) as http:
        if spec.target == "agent":
            streams, go = await _prepare_agent(spec, share)
        else:
            streams, go = await _prepare_chat(spec, share, http)
        await ready()
        await wait_go()
        await go()
        # Not wait_for(gather(...)): its timeout would cancel the streams' futures, and a stream given
        # up would then not be counted.
        await asyncio.wait([s.done for s in streams], timeout=spec.timeout_s)
        for stream in streams:
            stream.finish(f"no end within {spec.timeout_s:.0f} s")
            if isinstance(stream, WebSocketStream):
                stream.close()
        share.ended = time.time()
    return share


def _loop_factory():
    try:
        import uvloop
    except ImportError:  # not built for this platform: the standard loop, a little more CPU per read
        return None
    return uvloop.new_event_loop


def worker(conn) -> None:
    """A client process: runs each ``LevelSpec`` it is sent, answering "ready", then the ``Share``
    once the main process has said "go"."""
    while True:
        spec = conn.recv()
        if spec is None:
            return

        async def ready() -> None:
            conn.send("ready")

        async def wait_go() -> None:
            if await asyncio.to_thread(conn.recv) != "go":
                raise RuntimeError("expected go")

        try:
            # uvloop (which uvicorn[standard] brings) costs a fraction of asyncio's loop per socket read.
            with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                share = runner.run(run_level(spec, ready, wait_go))
        except Exception as exc:  # noqa: BLE001 - reported to the main process, which stops the run
            conn.send(("failed", f"{type(exc).__name__}: {exc}"))
            continue
        conn.send(share)


class Clients:
    """``count`` client processes, kept for a whole benchmark; a level's streams are split over them."""

    def __init__(self, count: int) -> None:
        ctx = multiprocessing.get_context("spawn")  # a clean interpreter: no inherited event loop
        self.pipes = []
        self.procs = []
        for _ in range(count):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=worker, args=(child,), daemon=True)
            proc.start()
            self.pipes.append(parent)
            self.procs.append(proc)

    def cpu_seconds(self) -> float:
        """User + system CPU time of the client processes (they start no children)."""
        return sum(sum(psutil.Process(p.pid).cpu_times()[:2]) for p in self.procs)

    async def _recv(self, pipe) -> Any:
        answer = await asyncio.to_thread(pipe.recv)
        if isinstance(answer, tuple) and answer[0] == "failed":
            raise RuntimeError(f"a client process failed: {answer[1]}")
        return answer

    async def run(self, specs: list[LevelSpec], between) -> Share:
        """Send each process its spec, wait until all are set up, call ``between()``, start them
        all, collect and merge their shares."""
        used = [(pipe, spec) for pipe, spec in zip(self.pipes, specs, strict=True) if spec.streams]
        for pipe, spec in used:
            pipe.send(spec)
        answers = await asyncio.gather(*(self._recv(pipe) for pipe, _ in used), return_exceptions=True)
        failures = [a for a in answers if isinstance(a, BaseException)]
        if failures:
            for (pipe, _), answer in zip(used, answers, strict=True):
                if not isinstance(answer, BaseException):
                    pipe.send("abort")  # its run_level raises on anything but "go"
                    await asyncio.to_thread(pipe.recv)
            raise failures[0]
        between()
        for pipe, _ in used:
            pipe.send("go")
        merged = Share()
        for share in await asyncio.gather(*(self._recv(pipe) for pipe, _ in used)):
            merged.merge(share)
        return merged

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.send(None)
        for proc in self.procs:
            proc.join(10)


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]
