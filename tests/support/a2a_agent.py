"""A real A2A agent for the tests, written on the reference SDK's server side (``a2a-sdk``).

What it does is read from the user's text, as a scripted model would:

- ``ask ...``: asks "Which city?" (``INPUT_REQUIRED``); the answer, sent with the same ``taskId``,
  is streamed back as "Booked a trip to <answer>.";
- ``slow N ...``: streams N numbered words, one per ``SLOW_CHUNK_S`` seconds, the first after
  ``gate`` is set (a test holds the stream there to cut it or stop it mid-answer);
- ``fail``: ends ``FAILED`` with a status message; ``reject``: ends ``REJECTED``;
- anything else: a ``WORKING`` status message ("Reading: <text>"), then "Echo: <text>" in three
  appended chunks of the ``answer`` artifact, then ``COMPLETED``.

``A2ATestAgent.app`` serves the card at ``/.well-known/agent-card.json``, JSON-RPC at ``/jsonrpc`` and
HTTP+JSON under ``/rest``. ``protocol_version="0.3"`` makes a card that declares 0.3 interfaces only
(the SDK's 0.3 compatibility serves them). ``bearer`` or ``api_key``: the credential it requires.
"""

from __future__ import annotations

import asyncio
import hmac
from dataclasses import dataclass, field

from a2a.helpers.proto_helpers import new_task
from a2a.server.agent_execution.agent_executor import AgentExecutor
from a2a.server.agent_execution.context import RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore
from a2a.server.tasks.task_updater import TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part, TaskState
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse

SLOW_CHUNK_S = 0.05
ANSWER_ID = "answer"


@dataclass
class AgentLog:
    """What the agent saw: the texts it was sent, the tasks it was asked to cancel."""

    texts: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)  # task ids that ran to their end


class ScriptedExecutor(AgentExecutor):
    def __init__(self, log: AgentLog, gate: asyncio.Event) -> None:
        self.log = log
        self.gate = gate

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        text = context.get_user_input().strip()
        self.log.texts.append(text)
        task = context.current_task
        if task is None:  # a new task is announced before its first update (the SDK requires it)
            await event_queue.enqueue_event(new_task(context.task_id, context.context_id,
                                                     TaskState.TASK_STATE_SUBMITTED, history=[context.message]))
        if task is not None and task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await self._stream(updater, f"Booked a trip to {text}.")
            return
        word = text.split(" ", 1)[0].lower()
        if word == "ask":
            await updater.start_work()
            await updater.requires_input(updater.new_agent_message([Part(text="Which city?")]))
        elif word == "slow":
            await self._slow(updater, int(text.split()[1]))
        elif word == "fail":
            await updater.failed(updater.new_agent_message([Part(text="The tool crashed.")]))
        elif word == "reject":
            await updater.reject(updater.new_agent_message([Part(text="I do not do that.")]))
        else:
            await updater.start_work(updater.new_agent_message([Part(text=f"Reading: {text}")]))
            await self._stream(updater, f"Echo: {text}")

    async def _stream(self, updater: TaskUpdater, answer: str) -> None:
        third = max(1, len(answer) // 3)
        chunks = [answer[:third], answer[third:2 * third], answer[2 * third:]]
        for i, chunk in enumerate(chunks):
            await updater.add_artifact([Part(text=chunk)], artifact_id=ANSWER_ID, name="answer", append=i > 0,
                                       last_chunk=i == len(chunks) - 1)
        await updater.complete()
        self.log.finished.append(updater.task_id)

    async def _slow(self, updater: TaskUpdater, words: int) -> None:
        await updater.start_work()
        await self.gate.wait()
        for i in range(words):
            await updater.add_artifact([Part(text=f"w{i} ")], artifact_id=ANSWER_ID, name="answer", append=i > 0)
            await asyncio.sleep(SLOW_CHUNK_S)
        await updater.complete()
        self.log.finished.append(updater.task_id)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        self.log.cancelled.append(context.task_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class _RequireCredential(BaseHTTPMiddleware):
    def __init__(self, app, header: str, expected: str) -> None:
        super().__init__(app)
        self.header, self.expected = header, expected

    async def dispatch(self, request, call_next):
        if request.url.path.startswith("/.well-known/"):
            return await call_next(request)
        presented = request.headers.get(self.header, "")
        if not hmac.compare_digest(presented.encode(), self.expected.encode()):
            return JSONResponse({"error": "unauthenticated"}, status_code=401)
        return await call_next(request)


class A2ATestAgent:
    def __init__(
        self, base_url: str, *, name: str = "Echo Agent", protocol_version: str = "1.0",
        bearer: str | None = None, api_key: tuple[str, str] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.log = AgentLog()
        self.gate = asyncio.Event()
        self.gate.set()
        card = AgentCard(
            name=name, description="Echoes, asks and streams for the tests", version="1.0",
            supported_interfaces=[
                AgentInterface(url=f"{self.base_url}/jsonrpc", protocol_binding="JSONRPC",
                               protocol_version=protocol_version),
                AgentInterface(url=f"{self.base_url}/rest", protocol_binding="HTTP+JSON",
                               protocol_version=protocol_version),
            ],
            capabilities=AgentCapabilities(streaming=True, push_notifications=False),
            default_input_modes=["text/plain"], default_output_modes=["text/plain"],
            skills=[AgentSkill(id="echo", name="echo", description="echoes", tags=["echo"])],
        )
        handler = DefaultRequestHandler(
            agent_executor=ScriptedExecutor(self.log, self.gate), task_store=InMemoryTaskStore(), agent_card=card,
        )
        compat = protocol_version.startswith("0.")
        routes = [
            *create_agent_card_routes(card, cache_control="public, max-age=60"),
            *create_jsonrpc_routes(handler, "/jsonrpc", enable_v0_3_compat=compat),
            *create_rest_routes(handler, path_prefix="/rest", enable_v0_3_compat=compat),
        ]
        self.app = Starlette(routes=routes)
        if bearer is not None:
            self.app.add_middleware(_RequireCredential, header="Authorization", expected=f"Bearer {bearer}")
        elif api_key is not None:
            self.app.add_middleware(_RequireCredential, header=api_key[0], expected=api_key[1])

    @property
    def card_url(self) -> str:
        return f"{self.base_url}/.well-known/agent-card.json"
