"""Load test of the ConversationService (spec Story 8): chat users, 70% direct LLM, 30% agent.

Each simulated user owns two conversations, each with its WebSocket open: one for plain messages
(routed to the direct LLM) and one for ``/agent`` messages (delegated; the open agent session keeps
that conversation with the agent). A task posts a message and reads the WebSocket until the reply
has ended, and reports, beside the HTTP request itself:

- ``WS <path> first chunk``: POST sent -> first ``message.delta`` frame received,
- ``WS <path> reply``: POST sent -> the reply's last frame (``message.completed`` for direct,
  ``agent.complete`` for the agent),

as failures when the reply ends in an error, a notice (fallback, breaker) or does not end within
``LOAD_TURN_TIMEOUT_S``. Runs for any ``--run-time``; ``loadtests/run_load.py`` starts the whole
product and this file together. On its own, against running services::

    locust -f loadtests/locustfile.py --headless -u 50 -r 10 --run-time 10m --host http://127.0.0.1:8000

Configuration from the environment: ``LOAD_JWT_SECRET`` (the service's ``AUTH_JWT_SECRET``),
``LOAD_DIRECT_WEIGHT`` / ``LOAD_AGENT_WEIGHT`` (7 / 3), ``LOAD_TURN_TIMEOUT_S`` (60),
``LOAD_TURNS_PER_CONVERSATION`` (40: then the user starts a new conversation, as people do; one
conversation held for an hour of turns outgrows the agent profile's context, 64 000 tokens, after
about 290 agent turns, and from then on each agent call sends only the newest turns that fit).

The WebSocket client is websocket-client: plain sockets, which gevent (Locust's) patches. The
``websockets`` sync client runs a thread per connection, and under gevent closing one crashed the
whole Locust process in libev ("I/O watcher with invalid fd") half an hour into a run. Each socket is
read all the time by its own greenlet, as a browser reads its socket: the server's keepalive pings
are answered while the user is busy in the other conversation (read only during its own turns, the
agent conversation's socket missed its pongs and the server closed it: "Broken pipe" on the next turn).
"""

from __future__ import annotations

import os
import time
import uuid

import gevent
import orjson
import websocket
from gevent.queue import Empty, Queue
from locust import HttpUser, between, task

from conversation_service.auth.tokens import issue_token

JWT_SECRET = os.environ.get("LOAD_JWT_SECRET", "bench-jwt-secret-0123456789abcdef-0123456789")
TURN_TIMEOUT_S = float(os.environ.get("LOAD_TURN_TIMEOUT_S", "60"))
DIRECT_WEIGHT = int(os.environ.get("LOAD_DIRECT_WEIGHT", "7"))
AGENT_WEIGHT = int(os.environ.get("LOAD_AGENT_WEIGHT", "3"))
TURNS_PER_CONVERSATION = int(os.environ.get("LOAD_TURNS_PER_CONVERSATION", "40"))

QUESTIONS = ["what is 17*23", "summarise our last exchange", "what time is it", "tell me about the weather"]


class TurnFailed(Exception):
    pass


class Socket:
    """A conversation's WebSocket and the greenlet that reads it into a queue."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.ws = websocket.create_connection(url, header=[f"{k}: {v}" for k, v in headers.items()], timeout=10)
        self.ws.settimeout(None)
        self.frames: Queue = Queue()
        self.reader = gevent.spawn(self._read)

    def _read(self) -> None:
        try:
            while True:
                self.frames.put(orjson.loads(self.ws.recv()))  # recv answers pings as they come
        except Exception as exc:  # noqa: BLE001 - the turn that reads it next reports it
            self.frames.put(exc)

    def next_frame(self, timeout: float) -> dict:
        try:
            item = self.frames.get(timeout=timeout)
        except Empty:
            raise TimeoutError from None
        if isinstance(item, Exception):
            self.frames.put(item)  # the socket stays broken for whoever reads next
            raise item
        return item

    def close(self) -> None:
        self.reader.kill(block=False)
        try:
            self.ws.close()
        except OSError:
            pass


class ChatUser(HttpUser):
    wait_time = between(0.5, 1.5)

    def on_start(self) -> None:
        user = f"load-{uuid.uuid4().hex[:12]}"
        self.headers = {"Authorization": f"Bearer {issue_token(JWT_SECRET, user, 'load', ttl_s=24 * 3600)}"}
        self.conversations = {path: self._open(path) for path in ("direct", "agent")}
        self.turns = 0
        self.turns_in = {"direct": 0, "agent": 0}

    def on_stop(self) -> None:
        for _, ws in self.conversations.values():
            ws.close()

    def _open(self, path: str) -> tuple[str, Socket]:
        with self.client.post("/conversations", json={"title": f"load {path}"}, headers=self.headers,
                              name="POST /conversations", catch_response=True) as r:
            if r.status_code != 201:
                r.failure(f"status {r.status_code}")
                raise TurnFailed(f"could not create a conversation: {r.status_code}")
            conversation_id = r.json()["id"]
        url = self.host.replace("http://", "ws://").replace("https://", "wss://")
        return conversation_id, Socket(f"{url}/conversations/{conversation_id}/ws", self.headers)

    def _reopen(self, path: str) -> None:
        """Leave the conversation for a new one (also after a failed turn: frames of the failure
        may still be on their way and must not be read as the next turn's)."""
        _, ws = self.conversations[path]
        try:
            ws.close()
        finally:
            self.turns_in[path] = 0
            self.conversations[path] = self._open(path)

    @task(DIRECT_WEIGHT)
    def direct_message(self) -> None:
        self._turn("direct", QUESTIONS[self.turns % len(QUESTIONS)])

    @task(AGENT_WEIGHT)
    def agent_message(self) -> None:
        self._turn("agent", "/agent " + QUESTIONS[self.turns % len(QUESTIONS)])

    def _turn(self, path: str, content: str) -> None:
        self.turns += 1
        if self.turns_in[path] >= TURNS_PER_CONVERSATION:
            self._reopen(path)
        self.turns_in[path] += 1
        conversation_id, ws = self.conversations[path]
        expected = "direct_llm" if path == "direct" else "agent"
        started = time.perf_counter()
        with self.client.post(f"/conversations/{conversation_id}/messages", json={"content": content},
                              headers=self.headers, name=f"POST message [{path}]", catch_response=True) as r:
            if r.status_code != 202:
                r.failure(f"status {r.status_code}")
                return
            target = r.json()["route"]["target"]
            if target != expected:
                r.failure(f"routed to {target}, expected {expected}")
                return
        end = "message.completed" if path == "direct" else "agent.complete"
        first_reported = False
        error: Exception | None = None
        deadline = started + TURN_TIMEOUT_S
        try:
            while True:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    raise TurnFailed(f"no end of reply within {TURN_TIMEOUT_S:.0f} s")
                try:
                    frame = ws.next_frame(remaining)
                except TimeoutError:
                    raise TurnFailed(f"no end of reply within {TURN_TIMEOUT_S:.0f} s") from None
                kind = frame["type"]
                if kind == "message.delta" and not first_reported:
                    first_reported = True
                    self._report(f"WS {path} first chunk", started)
                elif kind == end:
                    break
                elif kind in ("message.error", "agent.error"):
                    raise TurnFailed(f"{kind}: {frame['data'].get('code')}")
                elif kind == "notice":
                    raise TurnFailed(f"notice: {frame['data'].get('code')}")
        except Exception as exc:  # noqa: BLE001 - whatever broke the reply, Locust counts it as failed
            error = exc
        self._report(f"WS {path} reply", started, error)
        if error is not None:
            self._reopen(path)

    def _report(self, name: str, started: float, exception: Exception | None = None) -> None:
        self.environment.events.request.fire(
            request_type="WS", name=name, response_time=(time.perf_counter() - started) * 1000,
            response_length=0, exception=exception, context={},
        )
