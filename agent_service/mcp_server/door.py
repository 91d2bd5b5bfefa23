"""The ``ask`` tool: a message to a profile of the agent, followed to its end.

A call starts a run (or answers the paused one it asked for), reads its events as the event log
gives them (``EventStreamer.serve``: from this process or another replica, a run that outlives a
dropped connection included), and tells the client how it goes with progress notifications (each
event's seq is the progress). The run's end is the result: the answer as text and as structured
content, with the session to go on with, and the files and links it made as resources; an ERROR is
the tool's error. A question of the agent (ASK_USER) becomes the client's to ask its user:

- 2026-07-28: the call answers ``input_required`` with an elicitation; the paused run waits in the
  database, so the client's retry (its answer, and the request state the SDK seals) may reach any
  replica, which answers the session and follows the run on;
- 2025-11-25, or a client that cannot be asked (no ``elicitation`` capability): the question is the
  result, with its session, and the next ``ask`` on that session is the answer. (An elicitation
  within the call would need the client to come back to the process holding the call, which a
  load balancer or ``--workers`` does not promise: the door serves 2025-11-25 without sessions.)

A call the client cancels at 2026-07-28 (its stream closed) cancels its run.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import mcp_types as types
import orjson
from mcp.server.context import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agent_service.access.caller import Caller
from agent_service.errors import AgentServiceError, NothingToCancel
from agent_service.events.streaming import EventStreamer
from agent_service.profiles.service import ProfileStore
from agent_service.runs.schemas import RunHandle
from agent_service.runs.service import RunService
from agent_service.sessions.service import SessionService
from shared.protocol import (
    Answer,
    AskUserKind,
    EventEnvelope,
    EventType,
    ExecuteRequest,
    SessionStatus,
    UserContext,
)

log = logging.getLogger(__name__)

TOOL = "ask"
_YES = frozenset({"yes", "y", "approve", "approved", "ok", "allow"})
_QUESTION_KEY = "question"
_TEXT_ANSWER = {"type": "object", "required": ["answer"],
                "properties": {"answer": {"type": "string", "title": "Your answer"}}}
_APPROVAL = {"type": "object", "required": ["approved"],
             "properties": {"approved": {"type": "boolean", "title": "Approve"}}}


def tool_definition(profiles: ProfileStore, default_profile: str) -> types.Tool:
    names = sorted(p.name for p in profiles.configured())
    return types.Tool(
        name=TOOL, title="Ask the TaskForce agent",
        description=(
            "Ask the TaskForce agent to do something with its tools; it may ask you a question on the way. "
            "Profiles: " + ", ".join(f"{p.name} ({p.description})" if p.description else p.name
                                     for p in profiles.configured())
        ),
        input_schema={
            "type": "object", "required": ["message"],
            "properties": {
                "message": {"type": "string", "minLength": 1, "description": "What to ask the agent"},
                "profile": {"type": "string", "enum": names, "default": default_profile,
                            "description": "Which of the agent's profiles answers"},
                "session_id": {"type": "string", "description": "Go on with this session (its session_id)"},
                "user_id": {"type": "string", "description": "A service: the user it asks for"},
                "org_id": {"type": "string", "description": "A service: that user's organisation"},
            },
        },
        annotations=types.ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=True),
    )


class RunFailed(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class AgentDoor:
    def __init__(
        self, *, profiles: ProfileStore, default_profile: str, runs: RunService, sessions: SessionService,
        streamer: EventStreamer,
    ) -> None:
        self._profiles = profiles
        self._default_profile = default_profile
        self._runs = runs
        self._sessions = sessions
        self._streamer = streamer

    async def list_tools(self, ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool_definition(self._profiles, self._default_profile)])

    def input_schema(self, name: str) -> dict[str, Any] | None:
        return tool_definition(self._profiles, self._default_profile).input_schema if name == TOOL else None

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams, caller: Caller,
    ) -> types.CallToolResult | types.InputRequiredResult:
        if params.name != TOOL:
            return _error(f"unknown tool {params.name!r}; this server has one tool, {TOOL}")
        arguments = params.arguments or {}
        profile = str(arguments.get("profile") or self._default_profile)
        try:
            if params.request_state and params.input_responses:
                request = self._answer_of(params, profile, arguments, caller)
            else:
                request = await self._message_of(arguments, profile, caller)
            return await self._follow(ctx, request, caller)
        except AgentServiceError as exc:
            return _error(f"{exc.error}: {exc.detail}")
        except RunFailed as exc:
            return _error(exc.text)

    async def _message_of(self, arguments: dict[str, Any], profile: str, caller: Caller) -> ExecuteRequest:
        """A new message, or, to a session that waits for its question's answer, that answer."""
        message = arguments.get("message")
        if not isinstance(message, str) or not message.strip():
            raise RunFailed("message (a non-empty string) is required")
        user_id = arguments.get("user_id")
        requested = UserContext(user_id=str(user_id), org_id=arguments.get("org_id")) if user_id else None
        request = ExecuteRequest(
            session_id=arguments.get("session_id") or None, profile_name=profile, message=message,
            user_context=caller.acting_for(requested),
        )
        if request.session_id is not None:
            status = await self._sessions.status(request.session_id, caller)
            question = status.pending_question
            if status.status is SessionStatus.AWAITING_USER and question is not None:
                approved = question.kind is AskUserKind.APPROVAL and message.strip().lower() in _YES
                answer = Answer(question_id=question.question_id, text=message,
                                approved=approved if question.kind is AskUserKind.APPROVAL else None)
                return request.model_copy(update={"message": "", "answer": answer})
        return request

    def _answer_of(
        self, params: types.CallToolRequestParams, profile: str, arguments: dict[str, Any], caller: Caller,
    ) -> ExecuteRequest:
        """The 2026-07-28 retry: the client's answer to the question our ``input_required`` carried."""
        state = orjson.loads(params.request_state or "{}")
        reply = (params.input_responses or {}).get(_QUESTION_KEY)
        if not isinstance(reply, types.ElicitResult):
            raise RunFailed("the answer to the agent's question is missing")
        user_id = arguments.get("user_id")
        requested = UserContext(user_id=str(user_id), org_id=arguments.get("org_id")) if user_id else None
        return ExecuteRequest(
            session_id=state["session_id"], profile_name=profile, answer=_answer(state, reply),
            user_context=caller.acting_for(requested),
        )

    async def _follow(
        self, ctx: ServerRequestContext[Any], request: ExecuteRequest, caller: Caller,
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Run until the end or the agent's question, which the client asks its user."""
        handle = await self._runs.execute(request, None, caller)
        end, artifacts = await self._watch(ctx, handle, caller)
        if end.type is EventType.COMPLETE:
            return _complete(end, artifacts)
        if end.type is EventType.ERROR:
            return _error(f"the agent's run failed ({end.data.get('code')}): {end.data.get('message')}")
        question = {"session_id": end.session_id, **end.data}
        capabilities = ctx.session.client_capabilities
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and capabilities is not None and capabilities.elicitation:
            return _input_required(question)
        return _asked(question)

    async def _watch(
        self, ctx: ServerRequestContext[Any], handle: RunHandle, caller: Caller,
    ) -> tuple[EventEnvelope, list[dict[str, Any]]]:
        """The run's events as progress notifications, until its terminal one (returned, with the
        artifacts the run made); a call the client cancels cancels the run."""
        seen: list[EventEnvelope] = []
        artifacts: list[dict[str, Any]] = []

        def keep(envelope: EventEnvelope) -> bytes:
            seen.append(envelope)
            return b""

        async def tell(_: bytes) -> None:
            while seen:
                envelope = seen.pop(0)
                if envelope.type is EventType.ARTIFACT:
                    artifacts.append(envelope.data)
                if envelope.type in (EventType.COMPLETE, EventType.ERROR, EventType.ASK_USER):
                    ended.append(envelope)
                elif (note := _progress(envelope)) is not None:
                    await ctx.session.report_progress(envelope.seq, None, note)

        ended: list[EventEnvelope] = []
        try:
            await self._streamer.serve(
                tell, handle.session_id, handle.first_seq - 1, until_run=handle.run_id, live=handle.live, encode=keep,
            )
        except asyncio.CancelledError:
            await asyncio.shield(self._cancel(handle.session_id, caller))
            raise
        if not ended:
            raise RunFailed("the run's events ended without its end (the service is stopping); ask again")
        return ended[-1], artifacts

    async def _cancel(self, session_id: str, caller: Caller) -> None:
        try:
            await self._sessions.cancel(session_id, caller)
        except (NothingToCancel, AgentServiceError) as exc:
            log.info("MCP call cancelled; its run was not", extra={"session_id": session_id, "reason": str(exc)})


def _progress(envelope: EventEnvelope) -> str | None:
    data = envelope.data
    match envelope.type:
        case EventType.THOUGHT:
            return f"thinking: {str(data.get('text', ''))[:200]}"
        case EventType.TOOL_START:
            return f"calling {data.get('tool')}"
        case EventType.TOOL_END:
            return f"{data.get('tool')} {'done' if data.get('ok') else 'failed'}"
        case EventType.ANSWER_CHUNK:
            return str(data.get("text", ""))
        case EventType.WAITING:
            return f"waiting: {data.get('reason')}"
        case EventType.ARTIFACT:
            return f"made {data.get('name')}"
    return None


def _schema_of(question: dict[str, Any]) -> dict[str, Any]:
    return _APPROVAL if question.get("kind") == AskUserKind.APPROVAL.value else _TEXT_ANSWER


def _input_required(question: dict[str, Any]) -> types.InputRequiredResult:
    text = question["question"]
    if question.get("kind") == AskUserKind.APPROVAL.value:
        text = f"{text}\n(The agent asks to run {question.get('tool')} with {orjson.dumps(question.get('args')).decode()}.)"
    state = {key: question.get(key) for key in ("session_id", "question_id", "kind")}
    return types.InputRequiredResult(
        input_requests={_QUESTION_KEY: types.ElicitRequest(params=types.ElicitRequestFormParams(
            message=text, requested_schema=_schema_of(question)))},
        request_state=orjson.dumps(state).decode(),
    )


def _asked(question: dict[str, Any]) -> types.CallToolResult:
    """The question as the result: the client answers with ask on the session."""
    how = "yes or no" if question.get("kind") == AskUserKind.APPROVAL.value else "the answer"
    text = (f"The agent asks: {question['question']}\nAnswer with ask again: session_id "
            f"{question['session_id']}, message {how}.")
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content={key: question.get(key) for key in ("question", "session_id", "kind", "tool", "args")},
    )


def _answer(question: dict[str, Any], reply: types.ElicitResult) -> Answer:
    """The client's elicitation result as the answer to the agent's question: declined or
    dismissed, an approval refused and a question left unanswered."""
    content = reply.content or {}
    if question.get("kind") == AskUserKind.APPROVAL.value:
        approved = reply.action == "accept" and content.get("approved") is True
        return Answer(question_id=question["question_id"], text="approve" if approved else "deny", approved=approved)
    if reply.action != "accept":
        return Answer(question_id=question["question_id"], text="", approved=False)
    return Answer(question_id=question["question_id"], text=str(content.get("answer", "")))


def _complete(end: EventEnvelope, artifacts: list[dict[str, Any]]) -> types.CallToolResult:
    answer = str(end.data.get("answer", ""))
    content: list[Any] = [types.TextContent(type="text", text=answer)]
    for artifact in artifacts:
        content.append(_resource(artifact))
    return types.CallToolResult(
        content=content,
        structured_content={"answer": answer, "session_id": end.session_id, "run_id": end.run_id},
    )


def _resource(artifact: dict[str, Any]) -> Any:
    name, media_type = artifact.get("name", "artifact"), artifact.get("media_type", "application/octet-stream")
    uri = f"taskforce://artifacts/{artifact.get('artifact_id')}/{name}"
    if artifact.get("url"):
        return types.ResourceLink(type="resource_link", uri=artifact["url"], name=name, mime_type=media_type)
    if artifact.get("bytes") is not None:
        return types.EmbeddedResource(type="resource", resource=types.BlobResourceContents(
            uri=uri, mime_type=media_type, blob=artifact["bytes"]))
    text = artifact.get("text")
    if text is None:
        text = orjson.dumps(artifact.get("data")).decode()
    return types.EmbeddedResource(type="resource", resource=types.TextResourceContents(
        uri=uri, mime_type=media_type, text=text))


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
