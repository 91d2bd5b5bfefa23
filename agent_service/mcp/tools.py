"""A tool of an MCP server as one of the agent's tools (``MCPTool``), and which of a server's tools
can be offered to a model at all (``offerable``).

The model sees the tool as it sees a built-in one: a name (the server's prefix and the tool's own
name, characters a model's provider refuses replaced by ``_``), its description and its input
schema. A tool whose name or schema a provider cannot take (too long a name, a schema that is not a
JSON Schema of an object, too large or deep, or one that refers to other documents) is left out
with a warning: the server's other tools are still offered.

Its annotations set the defaults: ``idempotentHint`` says a repeated call is harmless (durable runs
repeat such a call whose outcome is unknown, never another); a tool that may change something
(``destructiveHint``, or no ``readOnlyHint``) waits for the user's approval unless the profile
says otherwise. A question its server asks mid-call pauses the run (``InputRequired``): at
2026-07-28 the server's ``requestState`` travels in the paused run's state, so any process can
resume it; at 2025-11-25 the call stays open in this process (``MCPConnection``).
"""

from __future__ import annotations

import logging
import re
from typing import Any

import mcp_types as types
import orjson
from jsonschema import SchemaError
from jsonschema.validators import validator_for

from agent_service.mcp import elicitation
from agent_service.mcp.config import TOOL_NAME
from agent_service.mcp.connection import Call, MCPConnection, Question
from agent_service.mcp.results import Reader
from agent_service.tools.base import InputRequired, Tool, ToolContext, ToolError, UserReply

log = logging.getLogger(__name__)

MAX_DESCRIPTION_CHARS = 2000
MAX_SCHEMA_DEPTH = 24
_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]")
# How many rounds of questions one call may take before it is given up (a server asking forever).
MAX_ROUNDS = 10


def model_name(prefix: str, name: str) -> str | None:
    """The name the model calls the tool by, or None when no provider would take it."""
    candidate = prefix + _NOT_NAME.sub("_", name)
    return candidate if TOOL_NAME.match(candidate) else None


def schema_problem(schema: Any, max_bytes: int) -> str | None:
    """Why a provider could not take ``schema`` as a tool's parameters; None when it can."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "its input schema is not a JSON Schema of an object"
    size = len(orjson.dumps(schema, default=str))
    if size > max_bytes:
        return f"its input schema is {size} bytes (at most {max_bytes})"
    if _depth(schema) > MAX_SCHEMA_DEPTH:
        return f"its input schema nests deeper than {MAX_SCHEMA_DEPTH} levels"
    if any(not ref.startswith("#") for ref in _refs(schema)):
        return "its input schema refers to other documents ($ref)"
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        return f"its input schema is not a valid JSON Schema ({exc.message[:200]})"
    return None


def _depth(value: Any, level: int = 0) -> int:
    if level > MAX_SCHEMA_DEPTH:
        return level
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level)
    return level


def _refs(value: Any) -> list[str]:
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str):
                found.append(ref)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def needs_approval(annotations: types.ToolAnnotations | None) -> bool:
    """What a profile gets unless it says otherwise: a tool that may change something asks."""
    if annotations is None:
        return True
    return annotations.read_only_hint is not True or annotations.destructive_hint is True


class MCPTool(Tool):
    def __init__(self, connection: MCPConnection, definition: types.Tool, name: str, reader: Reader) -> None:
        self.connection = connection
        self.remote_name = definition.name
        self.name = name  # type: ignore[misc] - a ClassVar of built-in tools, each instance's own here
        self.description = (definition.description or definition.title or definition.name)[:MAX_DESCRIPTION_CHARS]
        self.parameters = definition.input_schema
        annotations = definition.annotations
        self.idempotent = bool(annotations and annotations.idempotent_hint)
        self.asks_approval = needs_approval(annotations)
        self.server = connection.name
        # The engine's bound, past the connection's own (which says more): a call is timed by it.
        self.timeout_s = connection.server.call_timeout_s + 5.0
        self._reader = reader

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        return self._settle(await self.connection.call(self.remote_name, args), args, rounds=0)

    async def resume(self, args: dict[str, Any], state: dict[str, Any], reply: UserReply, ctx: ToolContext) -> Any:
        if state.get("held") is not None:
            return await self._answer_held(args, state, reply)
        return await self._answer_round(args, state, reply)

    async def _answer_held(self, args: dict[str, Any], state: dict[str, Any], reply: UserReply) -> Any:
        """2025-11-25: the call this process holds takes the answer and goes on."""
        params = elicitation.params_of(state["question"])
        try:
            result = elicitation.answer(params, reply)
        except elicitation.AnswerDoesNotFit as exc:
            raise InputRequired(self._question(params, str(exc)), state) from None
        rounds = int(state.get("rounds", 0)) + 1
        return self._settle(await self.connection.answer(state["held"], result), args, rounds)

    async def _answer_round(self, args: dict[str, Any], state: dict[str, Any], reply: UserReply) -> Any:
        """2026-07-28: the answer joins the round's responses; the call is made again with them
        and the server's request state once every question of the round is answered."""
        requests: dict[str, Any] = state["requests"]
        responses: dict[str, Any] = dict(state.get("responses") or {})
        key = state["asking"]
        params = elicitation.params_of(requests[key]["params"])
        try:
            responses[key] = elicitation.answer(params, reply).model_dump(mode="json", by_alias=True,
                                                                            exclude_none=True)
        except elicitation.AnswerDoesNotFit as exc:
            raise InputRequired(self._question(params, str(exc)), state) from None
        rounds = int(state.get("rounds", 0))
        unanswered = [k for k in requests if k not in responses]
        if unanswered:
            return self._ask_next(requests, responses, state["request_state"], rounds)
        typed: types.InputResponses = {
            k: (types.ElicitResult if k in requests else types.ListRootsResult).model_validate(v)
            for k, v in responses.items()
        }
        outcome = await self.connection.call(
            self.remote_name, args, input_responses=typed, request_state=state["request_state"],
        )
        return self._settle(outcome, args, rounds + 1)

    def _settle(self, outcome: Any, args: dict[str, Any], rounds: int) -> Any:
        """The call's result for the model, or its next question for the user."""
        if rounds > MAX_ROUNDS:
            raise ToolError(f"{self.name} asked more than {MAX_ROUNDS} questions in one call; it was given up")
        if isinstance(outcome, types.CallToolResult):
            return self._reader.read(self.name, outcome)
        if isinstance(outcome, types.InputRequiredResult):
            return self._round(outcome, rounds)
        call, question = outcome
        assert isinstance(call, Call) and isinstance(question, Question)
        state = {"held": call.id, "question": elicitation.dump(question.params), "rounds": rounds}
        raise InputRequired(self._question(question.params), state)

    def _round(self, result: types.InputRequiredResult, rounds: int) -> Any:
        requests: dict[str, Any] = {}
        responses: dict[str, Any] = {}
        for key, request in (result.input_requests or {}).items():
            if isinstance(request, types.ElicitRequest):
                requests[key] = request.model_dump(mode="json", by_alias=True, exclude_none=True)
            elif isinstance(request, types.ListRootsRequest):
                responses[key] = types.ListRootsResult(roots=[]).model_dump(mode="json", by_alias=True)
            else:
                raise ToolError(f"{self.name} asked for {request.method}, which this agent does not offer")
        if not requests:
            raise ToolError(f"{self.name} asked for input this agent cannot give")
        return self._ask_next(requests, responses, result.request_state, rounds)

    def _ask_next(self, requests: dict[str, Any], responses: dict[str, Any], request_state: str | None,
                  rounds: int) -> Any:
        key = next(k for k in requests if k not in responses)
        state = {"requests": requests, "responses": responses, "asking": key, "request_state": request_state,
                 "rounds": rounds}
        raise InputRequired(self._question(elicitation.params_of(requests[key]["params"])), state)

    def _question(self, params: types.ElicitRequestParams, problem: str | None = None) -> str:
        return elicitation.question(self.server, self.remote_name, params, problem)
