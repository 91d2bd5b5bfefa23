"""A controllable Agent Service for resilience tests: a small real Starlette app served on loopback.

It speaks contract v1 (``POST /api/v1/agent/execute``, ``GET .../sessions/{id}/events`` with
``Last-Event-ID``, ``GET .../sessions/{id}``, ``GET /health``) and answers each execute the way
the test tells it to: an HTTP error (503, 408, 400, 500), a whole run, a run whose stream is cut in
the middle of an event, or a run held until the test releases it. Every call is recorded, so a
test can count tries and check the ``Idempotency-Key`` they carried.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from shared.protocol import EventEnvelope, EventType, utcnow
from shared.sse import SSE_MEDIA_TYPE, encode_envelope

# The run every successful execute streams: a tool call, then the answer in distinct chunks (so a
# duplicate or a lost chunk shows in the text).
ANSWER_CHUNKS = ("Seventeen ", "times ", "twenty-three ", "is ", "391.")
ANSWER = "".join(ANSWER_CHUNKS)

# Modes of one execute call.
OK = "ok"
CUT = "cut"  # stream a few events, then half an event, then end the body
HOLD = "hold"  # wait for ``release()``, then stream the run
ERROR_STATUSES = {
    "503": (503, "service_unavailable", "the agent pool is busy"),
    "408": (408, "request_timeout", "execution did not start in time"),
    "400": (400, "bad_request", "chat_history[3].role: Input should be 'user', 'assistant' or 'system'"),
    "500": (500, "internal_error", "KeyError: 'profile' at engine.py:212"),
}


@dataclass
class ExecuteCall:
    idempotency_key: str | None
    api_key: str | None
    session_id: str | None
    message: str
    mode: str
    # The ConversationService sends its conversation id in the execute's metadata.
    conversation_id: str | None = None
    # The contents of the chat history it sent, oldest first.
    chat_history: list[str] = field(default_factory=list)


@dataclass
class FakeAgentService:
    api_key: str
    # Events of a CUT run delivered in full before the stream is cut mid-event.
    cut_after: int = 5
    default_mode: str = OK
    plan: deque[str] = field(default_factory=deque)
    execute_calls: list[ExecuteCall] = field(default_factory=list)
    resume_calls: list[tuple[str, str | None]] = field(default_factory=list)
    # Each session's event log, and which session and run an idempotency key started.
    _log: dict[str, list[EventEnvelope]] = field(default_factory=dict)
    _by_key: dict[str, str] = field(default_factory=dict)
    _by_key_run: dict[str, list[EventEnvelope]] = field(default_factory=dict)
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _released: asyncio.Event = field(default_factory=asyncio.Event)
    _call_seen: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.app = Starlette(routes=[
            Route("/health", self._health),
            Route("/api/v1/agent/execute", self._execute, methods=["POST"]),
            Route("/api/v1/agent/sessions/{session_id}/events", self._events),
            Route("/api/v1/agent/sessions/{session_id}", self._status),
        ])

    # -- test controls -------------------------------------------------------------------------

    def then(self, *modes: str) -> None:
        """The next execute calls answer with these modes, in order; later ones use ``default_mode``."""
        self.plan.extend(modes)

    def release(self) -> None:
        self._released.set()

    async def wait_for_calls(self, n: int, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while len(self.execute_calls) < n:
                self._call_seen.clear()
                await self._call_seen.wait()

    # -- routes --------------------------------------------------------------------------------

    async def _health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def _execute(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        mode = self.plan.popleft() if self.plan else self.default_mode
        key = request.headers.get("idempotency-key")
        self.execute_calls.append(ExecuteCall(key, request.headers.get("x-api-key"), body.get("session_id"),
                                              body.get("message", ""), mode,
                                              (body.get("metadata") or {}).get("conversation_id"),
                                              [m.get("content", "") for m in body.get("chat_history") or ()]))
        self._call_seen.set()
        if request.headers.get("x-api-key") != self.api_key:
            return JSONResponse({"error": "unauthorized", "detail": None}, status_code=401)
        if mode in ERROR_STATUSES:
            status, error, detail = ERROR_STATUSES[mode]
            return JSONResponse({"error": error, "detail": detail}, status_code=status)
        session_id = body.get("session_id") or self._by_key.get(key or "") or f"fake-sess-{next(self._ids)}"
        run = self._by_key_run.get(key or "")
        if run is None:
            # A new key starts a run; a repeated key joins the run its first try started.
            log = self._log.setdefault(session_id, [])
            run = self._new_run(session_id, first_seq=len(log) + 1)
            log.extend(run)
            if key:
                self._by_key[key] = session_id
                self._by_key_run[key] = run
        if mode == HOLD:
            await self._released.wait()
        if mode == CUT:
            return self._sse(self._cut(run))
        return self._sse(self._whole(run))

    async def _events(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        last = request.headers.get("last-event-id")
        self.resume_calls.append((session_id, last))
        run = self._log.get(session_id)
        if run is None:
            return JSONResponse({"error": "not_found", "detail": "no such session"}, status_code=404)
        after = int(last) if last and last.isdigit() else 0
        return self._sse(self._whole([e for e in run if e.seq > after]))

    async def _status(self, request: Request) -> Response:
        session_id = request.path_params["session_id"]
        run = self._log.get(session_id)
        if run is None:
            return JSONResponse({"error": "not_found", "detail": "no such session"}, status_code=404)
        now = utcnow().isoformat()
        return JSONResponse({"session_id": session_id, "profile_name": "default", "status": "COMPLETED",
                             "last_seq": run[-1].seq, "created_at": now, "updated_at": now})

    # -- streams -------------------------------------------------------------------------------

    @staticmethod
    def _new_run(session_id: str, first_seq: int) -> list[EventEnvelope]:
        payloads: list[tuple[EventType, dict[str, Any]]] = [
            (EventType.THOUGHT, {"text": "I will use the calculator.", "step": 1}),
            (EventType.TOOL_START, {"call_id": "c1", "tool": "calculator", "args": {"expression": "17*23"}}),
            (EventType.TOOL_END, {"call_id": "c1", "tool": "calculator", "ok": True, "result": "391",
                                  "duration_ms": 0.5}),
            *((EventType.ANSWER_CHUNK, {"text": text}) for text in ANSWER_CHUNKS),
            (EventType.COMPLETE, {"answer": ANSWER}),
        ]
        return [
            EventEnvelope(session_id=session_id, run_id=f"run-{session_id}-{first_seq}", seq=seq, type=type_,
                          ts=utcnow(), data=data)
            for seq, (type_, data) in enumerate(payloads, start=first_seq)
        ]

    @staticmethod
    def _sse(body) -> StreamingResponse:
        return StreamingResponse(body, media_type=SSE_MEDIA_TYPE, headers={"Cache-Control": "no-cache"})

    @staticmethod
    async def _whole(events: list[EventEnvelope]):
        for envelope in events:
            yield encode_envelope(envelope)

    async def _cut(self, run: list[EventEnvelope]):
        for envelope in run[: self.cut_after]:
            yield encode_envelope(envelope)
        partial = encode_envelope(run[self.cut_after])
        # Half an event (no blank line ends it), then the body ends: the connection dropped.
        yield partial[: len(partial) // 2]
