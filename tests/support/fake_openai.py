"""A fake OpenAI-compatible chat-completions server, for tests and load benchmarks.

It is a real HTTP app (Starlette) served by uvicorn, so the provider under test goes through the
whole stack: sockets, HTTP/1.1 chunking, SSE framing. Each request is answered by the next
scripted reply (a queue), or by ``script(request_body)`` when given, or by a default text reply of
``tokens`` tokens. Pacing is configurable: time to first token and a delay per token. Every request
body (and its Authorization header) is recorded in ``requests``.

With ``tool_steps`` N, a request whose messages hold fewer than N tool results is answered with one
calculator call (an id of its own per step), so each run takes N tool steps before its text answer.

With ``stamp``, each word of a default reply is the wall-clock time (``time.time()``) at which it was
sent, ``t1732459200.123456``, so a client on the same host can tell how long the token took to reach
it through the services under test. With ``shared_clock``, paced default replies are sent by one
timer loop for every stream of the process (``Pacer``) instead of a sleep per token per stream, so
hundreds of streams cost the fake little CPU, and the pace holds at 2,000 tokens/s (0.5 ms a token):
every token due when the timer wakes goes out in one write, each still its own chunk with its own stamp.
``POST /pace`` changes the default reply's length and pace for the requests that follow, so one
fake serves a benchmark's successive model speeds.

Run on its own for load tests (``shared_clock`` is on there)::

    python -m tests.support.fake_openai --port 8999 --tokens 200 --ttft-ms 0 --token-delay-ms 0 [--stamp] [--tool-steps N]
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class TextReply:
    """Stream ``text`` (split into ``chunk_chars``-sized pieces) or, without text, ``tokens`` words."""

    text: str | None = None
    tokens: int | None = None
    reasoning: str = ""
    reasoning_field: str = "reasoning_content"  # vLLM/DeepSeek; Ollama and others use "reasoning"
    chunk_chars: int = 4
    usage: bool = True
    finish_reason: str = "stop"
    ttft_ms: float | None = None
    send_done: bool = True


@dataclass
class ToolCallReply:
    """Stream tool calls, each one's JSON arguments cut into ``fragment_chars``-sized fragments, the
    fragments of parallel calls interleaved the way OpenAI does."""

    calls: list[tuple[str, dict[str, Any]]]
    text: str = ""
    fragment_chars: int = 3
    raw_arguments: dict[int, str] = field(default_factory=dict)  # index -> literal (possibly invalid) JSON
    usage: bool = True
    ttft_ms: float | None = None
    # The calls' ids: ``<prefix><index>``.
    id_prefix: str = "call_fake_"


@dataclass
class ErrorReply:
    status: int
    message: str = "fake failure"
    raw_body: str | None = None  # sent verbatim instead of the OpenAI error object


@dataclass
class RawReply:
    """Send these SSE ``data:`` payloads verbatim (malformed chunks, a cut stream...)."""

    data: list[str]
    ttft_ms: float | None = None


Reply = TextReply | ToolCallReply | ErrorReply | RawReply


@dataclass
class RecordedRequest:
    body: dict[str, Any]
    authorization: str | None
    traceparent: str | None = None  # W3C trace context the caller sent (tracing on)


class FakeOpenAI:
    def __init__(
        self,
        *,
        tokens: int = 20,
        ttft_ms: float = 0.0,
        token_delay_ms: float = 0.0,
        script: Callable[[dict[str, Any]], Reply] | None = None,
        model: str = "fake-model",
        record_requests: bool = True,
        stamp: bool = False,
        shared_clock: bool = False,
        tool_steps: int = 0,
    ) -> None:
        self.tokens = tokens
        self.tool_steps = tool_steps
        self.ttft_ms = ttft_ms
        self.token_delay_ms = token_delay_ms
        self.script = script
        self.model = model
        self.record_requests = record_requests  # a long load run keeps no history
        self.stamp = stamp
        self.pacer = Pacer() if shared_clock else None
        self.replies: deque[Reply] = deque()
        self.requests: list[RecordedRequest] = []
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat_completions, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/health", self._health, methods=["GET"]),
                Route("/pace", self._set_pace, methods=["POST"]),
            ]
        )

    def enqueue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def _tool_step(self, body: dict[str, Any]) -> Reply | None:
        """A calculator call while the run has taken fewer than ``tool_steps`` tool steps."""
        if not self.tool_steps or self.replies or self.script is not None:
            return None
        done = sum(1 for m in body["messages"] if isinstance(m, dict) and m.get("role") == "tool")
        if done >= self.tool_steps:
            return None
        return ToolCallReply(calls=[("calculator", {"expression": f"{done} + 1"})], id_prefix=f"call_step{done}_")

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        if self.replies:
            return self.replies.popleft()
        if self.script is not None:
            return self.script(body)
        return TextReply(tokens=self.tokens)

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def _set_pace(self, request: Request) -> Response:
        """``{"tokens": N, "ttft_ms": x, "token_delay_ms": y, "write_every_ms": z}`` (any of them) for the
        replies that follow; ``write_every_ms``: the shared clock's grain, how often a stream is written."""
        body = orjson.loads(await request.body())
        for key in ("tokens", "ttft_ms", "token_delay_ms", "write_every_ms"):
            if key in body and (not isinstance(body[key], int | float) or body[key] < 0):
                return _error(400, f"{key} must be a number >= 0")
        for key in ("tokens", "ttft_ms", "token_delay_ms"):
            if key in body:
                setattr(self, key, int(body[key]) if key == "tokens" else float(body[key]))
        if self.pacer is not None and body.get("write_every_ms"):
            self.pacer.grain_s = body["write_every_ms"] / 1000
        return JSONResponse({"tokens": self.tokens, "ttft_ms": self.ttft_ms, "token_delay_ms": self.token_delay_ms,
                             "write_every_ms": None if self.pacer is None else self.pacer.grain_s * 1000})

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _chat_completions(self, request: Request) -> Response:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return _error(400, "request body is not JSON")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "'messages' is required")
        if self.record_requests:
            self.requests.append(RecordedRequest(body=body, authorization=request.headers.get("authorization"),
                                                 traceparent=request.headers.get("traceparent")))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        reply = self._tool_step(body)
        if reply is None and self.pacer is not None and self.token_delay_ms > 0 and not self.replies \
                and self.script is None:
            return _PacedResponse(self, include_usage)
        if reply is None:
            reply = self._next_reply(body)
        if isinstance(reply, ErrorReply):
            if reply.raw_body is not None:
                return Response(reply.raw_body, status_code=reply.status, media_type="text/plain")
            return _error(reply.status, reply.message)
        return StreamingResponse(self._stream(reply, include_usage), media_type="text/event-stream")

    async def _stream(self, reply: Reply, include_usage: bool) -> AsyncIterator[bytes]:
        created = int(time.time())
        completion_id = f"chatcmpl-fake{created}"

        def chunk(delta: dict[str, Any] | None, finish: str | None = None, usage: dict | None = None) -> bytes:
            payload: dict[str, Any] = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.model,
                "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            if usage is not None:
                payload["usage"] = usage
            return b"data: " + orjson.dumps(payload) + b"\n\n"

        ttft = reply.ttft_ms if reply.ttft_ms is not None else self.ttft_ms
        await asyncio.sleep(ttft / 1000)  # simulated model latency, not synchronisation

        if isinstance(reply, RawReply):
            for data in reply.data:
                yield b"data: " + data.encode() + b"\n\n"
            return

        yield chunk({"role": "assistant", "content": ""})
        produced = 0
        if isinstance(reply, TextReply):
            for piece in _pieces(reply.reasoning, reply.chunk_chars):
                produced += 1
                yield chunk({reply.reasoning_field: piece})
                await self._pace()
            if reply.text is not None:
                pieces: Iterable[str] = _pieces(reply.text, reply.chunk_chars)
            elif self.stamp:
                pieces = (_stamp(i) for i in range(reply.tokens or self.tokens))  # stamped as it is sent
            else:
                pieces = _word_pieces(_words(reply.tokens or self.tokens))
            for piece in pieces:
                produced += 1
                yield chunk({"content": piece})
                await self._pace()
            yield chunk({}, reply.finish_reason)
            if reply.usage and include_usage:
                yield chunk(None, usage={"prompt_tokens": 11, "completion_tokens": produced, "total_tokens": 11 + produced})
            if reply.send_done:
                yield b"data: [DONE]\n\n"
            return

        for piece in _pieces(reply.text, 4):
            produced += 1
            yield chunk({"content": piece})
        arguments = [
            reply.raw_arguments.get(i, orjson.dumps(args).decode()) for i, (_, args) in enumerate(reply.calls)
        ]
        fragments = [list(_pieces(a, reply.fragment_chars)) for a in arguments]
        for i, (name, _) in enumerate(reply.calls):
            yield chunk(
                {"tool_calls": [{"index": i, "id": f"{reply.id_prefix}{i}", "type": "function",
                                 "function": {"name": name, "arguments": ""}}]}
            )
        # Interleave the parallel calls' fragments: call 0 piece 0, call 1 piece 0, call 0 piece 1...
        for step in range(max((len(f) for f in fragments), default=0)):
            for i, pieces in enumerate(fragments):
                if step < len(pieces):
                    produced += 1
                    yield chunk({"tool_calls": [{"index": i, "function": {"arguments": pieces[step]}}]})
                    await self._pace()
        yield chunk({}, "tool_calls")
        if reply.usage and include_usage:
            yield chunk(None, usage={"prompt_tokens": 11, "completion_tokens": produced, "total_tokens": 11 + produced})
        yield b"data: [DONE]\n\n"

    async def _pace(self) -> None:
        if self.token_delay_ms:
            await asyncio.sleep(self.token_delay_ms / 1000)  # simulated generation speed


class Pacer:
    """One timer loop for every paced stream: a heap of (when the stream's next piece is due, the
    stream), woken once per millisecond grain at most, writing every piece that is due. The cost
    per token is at most one write, not a timer, a task switch and a generator step per stream; at
    more than one token per grain (2,000 tokens/s is two per millisecond) a stream's due tokens share
    one write, as a fast model's do in one TCP segment.

    Each stream keeps its own absolute schedule (first token at start + ttft, then one per delay):
    a loop that falls behind sends late pieces at once, as a hosted model's tokens keep coming
    whatever the client does, and the stamps say when each was really sent."""

    def __init__(self, grain_s: float = 0.001) -> None:
        self.grain_s = grain_s
        self._heap: list[tuple[float, int, _PacedStream]] = []
        self._order = itertools.count()
        self._task: asyncio.Task | None = None
        self._alarm: asyncio.Future | None = None
        self._alarm_at = math.inf

    def add(self, stream: _PacedStream, due: float) -> None:
        heapq.heappush(self._heap, (due, next(self._order), stream))
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        elif due < self._alarm_at and self._alarm is not None and not self._alarm.done():
            self._alarm.set_result(None)  # due before the loop's next wake-up: wake it now

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        heap = self._heap
        try:
            while heap:
                now = loop.time()
                if heap[0][0] > now:
                    wake = math.ceil(heap[0][0] / self.grain_s) * self.grain_s
                    self._alarm, self._alarm_at = loop.create_future(), wake
                    timer = loop.call_at(wake, _resolve, self._alarm)
                    await self._alarm
                    timer.cancel()
                    self._alarm, self._alarm_at = None, math.inf
                    continue
                while heap and heap[0][0] <= now:
                    _, _, stream = heapq.heappop(heap)
                    # A 200-token reply (~40 KB) fits in the transport's write buffer (64 KiB), so a
                    # write does not wait on one slow reader while the others are due.
                    due = await stream.step(now)
                    if due is not None:
                        heapq.heappush(heap, (due, next(self._order), stream))
        finally:
            self._task = None


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class _PacedStream:
    """A default reply written by the ``Pacer`` on an absolute schedule: role and token 0 at
    ``start``, token i at ``start + i * delay``, then the finish, usage and ``[DONE]`` one delay
    after the last token. Each step writes everything due by then."""

    def __init__(self, fake: FakeOpenAI, send: Callable, include_usage: bool, start: float) -> None:
        self.fake = fake
        self.send = send
        self.include_usage = include_usage
        self.start = start
        self.delay = fake.token_delay_ms / 1000
        self.tokens = fake.tokens  # a later POST /pace does not change a reply under way
        self.index = 0  # the next piece to write: token index, ``tokens`` for the tail
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()
        created = int(time.time())
        head = orjson.dumps({"id": f"chatcmpl-fake{created}", "object": "chat.completion.chunk",
                             "created": created, "model": fake.model})[:-1]
        self._prefix = b"data: " + head + b',"choices":[{"index":0,"delta":{"content":"'
        self._suffix = b'"},"finish_reason":null}]}\n\n'
        self._head = head

    def _piece(self, i: int) -> bytes:
        text = _stamp(i) if self.fake.stamp else (f"token{i}" if i == 0 else f" token{i}")
        return self._prefix + text.encode() + self._suffix  # words and stamps need no JSON escaping

    def _tail(self) -> bytes:
        out = b"data: " + self._head + b',"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
        if self.include_usage:
            n = self.tokens
            usage = orjson.dumps({"prompt_tokens": 11, "completion_tokens": n, "total_tokens": 11 + n})
            out += b"data: " + self._head + b',"choices":[],"usage":' + usage + b"}\n\n"
        return out + b"data: [DONE]\n\n"

    def due_by(self, now: float) -> int:
        """How many pieces (tokens, then the tail) are due by ``now``: always the next one at least,
        since the timer woke for it (the float division may land a hair below a whole step)."""
        due = self.tokens + 1 if self.delay <= 0 else int((now - self.start) / self.delay + 1e-9) + 1
        return max(self.index + 1, min(due, self.tokens + 1))

    async def step(self, now: float) -> float | None:
        """Write every piece due by ``now`` in one write; the time the next one is due, or None once
        the reply is complete."""
        end = self.due_by(now)
        parts = []
        if self.index == 0:
            parts.append(b"data: " + self._head
                         + b',"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n')
        parts.extend(self._piece(i) for i in range(self.index, min(end, self.tokens)))  # stamped one by one
        last = end > self.tokens
        if last:
            parts.append(self._tail())
        self.index = end
        try:
            await self.send({"type": "http.response.body", "body": b"".join(parts), "more_body": not last})
        except Exception as exc:  # noqa: BLE001 - the reader is gone: end this stream, keep the others
            self.done.set_exception(exc)
            return None
        if last:
            self.done.set_result(None)
            return None
        return self.start + self.index * self.delay


class _PacedResponse(Response):
    """The ASGI response of a paced default reply: headers now, the body from the ``Pacer``."""

    def __init__(self, fake: FakeOpenAI, include_usage: bool) -> None:
        self.fake = fake
        self.include_usage = include_usage
        self.background = None

    async def __call__(self, scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream; charset=utf-8")]})
        start = asyncio.get_running_loop().time() + self.fake.ttft_ms / 1000
        stream = _PacedStream(self.fake, send, self.include_usage, start)
        assert self.fake.pacer is not None
        self.fake.pacer.add(stream, start)
        await stream.done


def _stamp(i: int) -> str:
    """A token whose text is the time it is sent (the first of a reply without the leading space)."""
    return f"t{time.time():.6f}" if i == 0 else f" t{time.time():.6f}"


def _error(status: int, message: str) -> Response:
    return JSONResponse(
        {"error": {"message": message, "type": "invalid_request_error", "code": None}}, status_code=status
    )


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), max(1, size))]


def _words(count: int) -> str:
    return " ".join(f"token{i}" for i in range(count))


def _word_pieces(text: str) -> list[str]:
    return [w if i == 0 else " " + w for i, w in enumerate(text.split(" "))]


@asynccontextmanager
async def running_fake_openai(fake: FakeOpenAI | None = None) -> AsyncIterator[tuple[FakeOpenAI, str]]:
    """Serve ``fake`` (a new one by default) on loopback; yields it and its API root (``.../v1``)."""
    from tests.support.servers import serve_app

    fake = fake or FakeOpenAI()
    async with serve_app(fake.app) as base_url:
        yield fake, f"{base_url}/v1"


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="Fake OpenAI-compatible streaming server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8999)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--token-delay-ms", type=float, default=0.0)
    parser.add_argument("--stamp", action="store_true",
                        help="each token of a default reply is the time it was sent: t<time.time()>")
    parser.add_argument("--tool-steps", type=int, default=0,
                        help="each run first calls the calculator this many times, one call per model turn")
    args = parser.parse_args(argv)
    if args.tokens < 0 or args.ttft_ms < 0 or args.token_delay_ms < 0 or args.tool_steps < 0:
        parser.error("--tokens, --ttft-ms, --token-delay-ms and --tool-steps must not be negative")
    fake = FakeOpenAI(
        tokens=args.tokens, ttft_ms=args.ttft_ms, token_delay_ms=args.token_delay_ms, record_requests=False,
        stamp=args.stamp, shared_clock=True, tool_steps=args.tool_steps,
    )
    uvicorn.run(fake.app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
