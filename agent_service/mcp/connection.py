"""One MCP server, kept connected: ``MCPConnection``.

A task of its own (``_supervise``) enters the SDK's ``Client`` and keeps it: it lists the server's
tools, lists them again when the server says they changed (``notifications/tools/list_changed`` at
2025-11-25, a ``subscriptions/listen`` stream at 2026-07-28), and when the connection is lost (a
stdio server exited, an HTTP server went away and took the SDK's transport with it) connects again
after a back-off (``AGENT_SERVICE_MCP_RESTART_DELAYS_SECONDS``, reset once the server stayed up a
minute). Meanwhile its tools stay listed and a call to one fails at once, saying so.

Each tool call runs in a task of the connection's (``Call``): the SDK fails the task that hosts a
transport which breaks, so calls never share the run's own task with it; a run that is cancelled
cancels its call's task, and the SDK tells the server (``notifications/cancelled``, or at
2026-07-28 over HTTP by closing the request's stream). A call is timed by its own clock, per
stretch of server work (to its result, or to a question the server asks), so time the user takes
to answer is not counted.

A 2025-11-25 server asks the user mid-call (``elicitation/create``) while its call stays open. Such
a call is held by this process (``_held``) until the user's answer comes, for at most the question's
lifetime, and its question is matched to its call by the task that made the call (HTTP carries it)
or, on stdio, as the only call in flight. A breaker per server turns a dead or hanging server into
one fast failure per call instead of a wait.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Coroutine
from enum import StrEnum
from typing import Any

import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from agent_service.mcp.config import Limits, MCPServer
from agent_service.mcp.metrics import MCPMetrics
from agent_service.mcp.transport import open_client
from agent_service.tools.base import ToolError
from shared.breaker import CircuitBreaker, CircuitOpenError

log = logging.getLogger(__name__)

# A request's read timeout in the SDK: none in effect. A call is bounded by its own clock (``Call.next``).
_NO_READ_TIMEOUT = 7 * 24 * 3600.0
# A server that stayed up this long has its restart back-off start again from the first delay.
_STABLE_S = 60.0
# Pages of tools/list read at most (a server whose cursor never ends cannot hold the listing).
_MAX_PAGES = 20
_current_call: contextvars.ContextVar[Call | None] = contextvars.ContextVar("mcp_call", default=None)


class ServerState(StrEnum):
    STARTING = "starting"
    READY = "ready"
    RESTARTING = "restarting"
    STOPPED = "stopped"


class CallDropped(Exception):
    """The call's task was cancelled by the SDK (its transport failed), not by the run."""


class Question:
    """A question the server asked during a call (2025-11-25), waiting for the user's answer."""

    def __init__(self, params: types.ElicitRequestParams) -> None:
        self.params = params
        self.answer: asyncio.Future[types.ElicitResult] = asyncio.get_running_loop().create_future()


class Call:
    """One ``tools/call`` in flight on the connection, and the questions its server asks."""

    def __init__(self, tool: str) -> None:
        self.id = uuid.uuid4().hex
        self.tool = tool
        self.task: asyncio.Task[Any] | None = None
        # The question shown to the user while the call is held.
        self.pending: Question | None = None
        self._questions: deque[Question] = deque()
        self._woken: asyncio.Future[None] | None = None

    def start(self, work: Coroutine[Any, Any, Any], name: str) -> None:
        self.task = asyncio.create_task(work, name=name)
        self.task.add_done_callback(self._wake)

    def ask(self, question: Question) -> None:
        self._questions.append(question)
        self._wake()

    def _wake(self, *_: Any) -> None:
        if self._woken is not None and not self._woken.done():
            self._woken.set_result(None)

    async def next(self, timeout_s: float) -> Any:
        """The call's result (``CallToolResult`` or ``InputRequiredResult``), or a ``Question``;
        raises what the call raised, or ``TimeoutError``. One future per wait, woken by either."""
        assert self.task is not None
        if not self.task.done() and not self._questions:
            self._woken = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(timeout_s):
                    await self._woken
            finally:
                self._woken = None
        if self.task.done():
            for question in self._questions:
                question.answer.cancel()  # asked as it ended: nobody will answer it
            self._questions.clear()
            if self.task.cancelled():
                raise CallDropped
            return self.task.result()
        return self._questions.popleft()

    def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()


class MCPConnection:
    def __init__(
        self, server: MCPServer, limits: Limits, metrics: MCPMetrics, on_tools: Callable[[], None],
    ) -> None:
        self.server = server
        self.name = server.name
        self.limits = limits
        self.metrics = metrics
        self.state = ServerState.STARTING
        # The server's tools as last listed (kept while it restarts: their calls fail, saying why).
        self.tools: list[types.Tool] = []
        self.protocol_version: str | None = None
        self.last_error: str | None = None
        self.restarts = 0
        self.breaker = CircuitBreaker(
            failure_threshold=limits.breaker_failures, window_seconds=limits.breaker_window_s,
            open_seconds=limits.breaker_open_s, service=f"MCP server {server.name!r}",
        )
        self._on_tools = on_tools
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._first = asyncio.Event()  # set once the first connection succeeded or failed
        self._ended = asyncio.Event()  # a stdio server's output ended
        self._relist = asyncio.Event()  # the server said its tools changed
        self._retry_at = 0.0
        self._calls: dict[str, Call] = {}
        self._held: dict[str, Call] = {}
        # The metrics' children of this server, looked up once (``labels`` locks on every call).
        self._outcomes: dict[str, Any] = {}
        self._duration = metrics.duration.labels(server.name)

    # -- life -------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start connecting; return once the first attempt succeeded or failed (a server that is
        down does not hold the service's start-up: its tools come when it does)."""
        self._task = asyncio.create_task(self._supervise(), name=f"mcp-{self.name}")
        await self._first.wait()

    async def aclose(self) -> None:
        self._stopping = True
        for call in list(self._calls.values()):
            call.cancel()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.state = ServerState.STOPPED

    async def _supervise(self) -> None:
        attempt = 0
        while not self._stopping:
            up_since = None
            try:
                async with self._connected() as client:
                    up_since = time.monotonic()
                    await self._serve(client)
                    reason = "its output ended (the process exited)"
            except asyncio.CancelledError:
                if self._stopping:
                    raise
                reason = "its connection broke"
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    task.uncancel()  # the SDK cancelled its host task for a transport that failed
            except Exception as exc:  # noqa: BLE001 - every failure to reach a server is a restart
                reason = _describe(exc)
            finally:
                self._client = None
                self._first.set()
            if self._stopping:
                return
            if up_since is not None and time.monotonic() - up_since >= _STABLE_S:
                attempt = 0
            delay = self.limits.restart_delays_s[min(attempt, len(self.limits.restart_delays_s) - 1)]
            attempt += 1
            self._lost(reason, delay)
            await asyncio.sleep(delay)

    def _lost(self, reason: str, delay: float) -> None:
        was_up = self.state is ServerState.READY
        self.state = ServerState.RESTARTING
        self.last_error = reason
        self._retry_at = time.monotonic() + delay
        self.metrics.up.labels(self.name).set(0)
        if was_up:
            self.restarts += 1
            self.metrics.restarts.labels(self.name).inc()
        log.warning("MCP server unavailable; connecting again", extra={
            "mcp_server": self.name, "reason": reason, "retry_in_s": delay})

    def _connected(self):
        self._ended = asyncio.Event()
        return open_client(
            self.server, self.limits, elicitation=self._on_elicit, on_message=self._on_message, ended=self._ended,
        )

    async def _serve(self, client: Client) -> None:
        """Use the connection until it ends: list the tools, and again whenever they change."""
        self.protocol_version = client.protocol_version
        await self._list_tools(client)
        self._client = client
        self.state = ServerState.READY
        self.last_error = None
        self.metrics.up.labels(self.name).set(1)
        self._first.set()
        log.info("MCP server connected", extra={
            "mcp_server": self.name, "protocol": self.protocol_version, "tools": len(self.tools)})
        listener = self._listen(client)
        try:
            while True:
                ended = asyncio.ensure_future(self._ended.wait())
                relist = asyncio.ensure_future(self._relist.wait())
                try:
                    await asyncio.wait({ended, relist}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    ended.cancel()
                    relist.cancel()
                if self._ended.is_set():
                    return
                self._relist.clear()
                await self._list_tools(client)
        finally:
            if listener is not None:
                listener.cancel()
                await asyncio.gather(listener, return_exceptions=True)

    def _listen(self, client: Client) -> asyncio.Task[None] | None:
        """At 2026-07-28 a server tells of changed tools on a ``subscriptions/listen`` stream."""
        capabilities = client.server_capabilities
        if client.protocol_version not in MODERN_PROTOCOL_VERSIONS or not (
                capabilities.tools and capabilities.tools.list_changed):
            return None

        async def listen() -> None:
            try:
                async with client.listen(tools_list_changed=True) as subscription:
                    async for _ in subscription:
                        self._relist.set()
            except (MCPError, TimeoutError, OSError) as exc:
                log.info("MCP tools subscription ended", extra={"mcp_server": self.name, "reason": _describe(exc)})

        return asyncio.create_task(listen(), name=f"mcp-{self.name}-listen")

    async def _list_tools(self, client: Client) -> None:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="bypass")
            tools += page.tools
            cursor = page.next_cursor
            if cursor is None:
                break
        self.tools = tools
        self._on_tools()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._relist.set()
        elif isinstance(message, Exception):
            # A line or event that is not JSON-RPC: the SDK drops it; we say so once per line.
            log.warning("MCP server sent something that is not MCP", extra={
                "mcp_server": self.name, "error": _describe(message)})

    # -- calls ------------------------------------------------------------------------------------

    def _usable(self) -> Client:
        """The client, or a ``ToolError`` saying why this server's tools cannot be used now."""
        client = self._client
        if client is not None and self.state is ServerState.READY:
            try:
                self.breaker.acquire()
            except CircuitOpenError as exc:
                self._count("refused")
                raise ToolError(
                    f"MCP server {self.name!r} is not answering (several calls failed or timed out); its tools "
                    f"are unavailable for another {exc.retry_after:.0f} s"
                ) from None
            return client
        self._count("refused")
        if self.state is ServerState.STARTING:
            raise ToolError(f"MCP server {self.name!r} is still starting; its tools are unavailable for now")
        wait = max(0.0, self._retry_at - time.monotonic())
        raise ToolError(
            f"MCP server {self.name!r} is unavailable ({self.last_error}); it is being restarted, next attempt in "
            f"{wait:.0f} s. Its tools cannot be used until then"
        )

    async def call(
        self, tool: str, arguments: dict[str, Any], *, input_responses: types.InputResponses | None = None,
        request_state: str | None = None,
    ) -> types.CallToolResult | types.InputRequiredResult | tuple[Call, Question]:
        """Call ``tool``: its result, the 2026-07-28 round that needs input, or (2025-11-25) the call
        held with the question its server asks."""
        client = self._usable()
        call = Call(tool)
        started = time.perf_counter()

        async def send() -> types.CallToolResult | types.InputRequiredResult:
            _current_call.set(call)
            return await client.session.call_tool(
                tool, arguments, read_timeout_seconds=_NO_READ_TIMEOUT, input_responses=input_responses,
                request_state=request_state, allow_input_required=True,
            )

        call.start(send(), f"mcp-{self.name}-{tool}")
        self._calls[call.id] = call
        assert call.task is not None
        call.task.add_done_callback(lambda _: self._calls.pop(call.id, None))
        return await self._await(call, started)

    async def answer(self, held: str, result: types.ElicitResult) -> Any:
        """Give a held call (``call`` returned it with a question) the user's answer; what the call
        does next, as ``call`` says. ``ToolError`` when this process holds no such call."""
        call = self._held.pop(held, None)
        if call is None or call.task is None or call.task.done():
            raise ToolError(
                f"the question of MCP server {self.name!r} can no longer be answered: the call that asked it was "
                "held open by a process that has stopped (or by another replica) or it timed out; whether the call "
                "did anything is unknown. Check before calling the tool again"
            )
        question = call.pending
        if question is not None and not question.answer.done():
            question.answer.set_result(result)
        return await self._await(call, time.perf_counter())

    async def _await(self, call: Call, started: float) -> Any:
        """The call's next outcome within the server's call timeout, settled for the breaker and
        the metrics; a run cancelled meanwhile cancels the call (the server is told)."""
        timeout = self.server.call_timeout_s
        try:
            outcome = await call.next(timeout)
        except asyncio.CancelledError:
            call.cancel()
            self.breaker.release()
            self._count("cancelled")
            raise
        except TimeoutError:
            call.cancel()
            self._settle(False, "timeout", started)
            raise ToolError(f"{call.tool} of MCP server {self.name!r} did not answer within {timeout:g} s") from None
        except BaseException as exc:  # noqa: BLE001 - every failure of a call is the model's to read
            raise self._failed(call, exc, started) from None
        if isinstance(outcome, Question):
            call.pending = outcome
            self._hold(call)
            self._settle(True, "asked", started)
            return call, outcome
        if isinstance(outcome, types.InputRequiredResult):
            self._settle(True, "input_required", started)
        else:
            self._settle(True, "error" if outcome.is_error else "ok", started)
        return outcome

    def _hold(self, call: Call) -> None:
        self._held[call.id] = call
        assert call.task is not None
        call.task.add_done_callback(lambda _: self._held.pop(call.id, None))

    def _settle(self, alive: bool, outcome: str, started: float) -> None:
        if alive:
            self.breaker.record_success()
        else:
            self.breaker.record_failure()
        self._count(outcome)
        self._duration.observe(time.perf_counter() - started)

    def _count(self, outcome: str) -> None:
        child = self._outcomes.get(outcome)
        if child is None:
            child = self._outcomes[outcome] = self.metrics.calls.labels(self.name, outcome)
        child.inc()

    def _failed(self, call: Call, exc: BaseException, started: float) -> ToolError:
        """What the model reads of a call that failed; the breaker counts the server's faults only."""
        where = f"{call.tool} of MCP server {self.name!r}"
        if isinstance(exc, MCPError):
            return self._refused(where, exc, started)
        if isinstance(exc, ValidationError):
            self._settle(True, "error", started)
            return ToolError(f"{where} sent a result that is not valid MCP ({exc.error_count()} errors); "
                             "it cannot be read")
        if isinstance(exc, RuntimeError):  # the SDK's check of structured content against the output schema
            self._settle(True, "error", started)
            return ToolError(f"{where} sent a result that does not match its own output schema: {exc}")
        if isinstance(exc, CallDropped):
            self._settle(False, "failed", started)
            return ToolError(f"{where}: the connection to the server broke during the call")
        self._settle(False, "failed", started)
        log.warning("MCP call failed", extra={"mcp_server": self.name, "tool": call.tool, "error": _describe(exc)})
        return ToolError(f"{where} failed: {_describe(exc)}")

    def _refused(self, where: str, exc: MCPError, started: float) -> ToolError:
        message = exc.error.message.splitlines()[0][:300]
        if "byte limit" in message:
            # An answer past the transport's cap (an SSE event, a JSON body): the server is there.
            self._settle(True, "error", started)
            return ToolError(f"{where} sent an answer over this server's cap of {self.server.max_result_bytes} "
                             "bytes; ask for less (a narrower query, a page of the results)")
        if exc.code == types.CONNECTION_CLOSED:
            self._settle(False, "failed", started)
            return ToolError(f"{where}: the connection to the server broke during the call ({message}); whether the "
                             "call did anything is unknown")
        self._settle(True, "error", started)
        if exc.code == types.PARSE_ERROR:
            return ToolError(f"{where} sent an answer that is not valid MCP; it cannot be read ({message})")
        if exc.code == types.INVALID_REQUEST and "Session terminated" in message:
            self._ended.set()  # the server forgot our session (it restarted): connect again
        return ToolError(f"{where} refused the call: {message} (error {exc.code})")

    async def _on_elicit(self, _ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult | types.ErrorData:
        """A 2025-11-25 server asks the user during a call: the question goes to that call's run,
        and the answer comes back when the user gives it (cancel when nobody does in time)."""
        call = _current_call.get()
        if call is None:
            # stdio carries no link from the question to its call: the only call in flight is it.
            calls = [c for c in self._calls.values() if c.task is not None and not c.task.done()]
            call = calls[0] if len(calls) == 1 else None
        if call is None:
            log.warning("MCP server asked a question no call could be found for; cancelled",
                        extra={"mcp_server": self.name})
            return types.ElicitResult(action="cancel")
        question = Question(params)
        call.ask(question)
        try:
            return await asyncio.wait_for(asyncio.shield(question.answer), self.limits.answer_timeout_s)
        except (TimeoutError, asyncio.CancelledError):
            if not question.answer.done():
                question.answer.cancel()
            if asyncio.current_task().cancelling():
                raise
            return types.ElicitResult(action="cancel")

    # -- what it reports --------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        report: dict[str, Any] = {
            "state": self.state.value, "transport": self.server.config.transport, "protocol": self.protocol_version,
            "tools": len(self.tools), "breaker": self.breaker.state.value, "restarts": self.restarts,
        }
        if self.last_error is not None:
            report["last_error"] = self.last_error
        return report


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0] if exc.exceptions else exc
        return _describe(inner)
    if isinstance(exc, MCPError):
        return f"{exc.error.message} (error {exc.code})"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__
