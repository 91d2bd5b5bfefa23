"""The tool interface: a name, a description the model reads and a JSON Schema of the arguments.

``run`` returns a JSON-serialisable result or raises ``ToolError`` with a message the model can
read and act on (the run goes on; TOOL_END reports ``ok: false``). A tool that makes something
for the user (a file, a link, data) returns a ``ToolOutput``: the model reads its ``result``, and
each of its ``artifacts`` becomes an ARTIFACT event of the run.

A tool that needs the user mid-call (an MCP server asking a question) raises ``InputRequired``:
the run pauses with the question (ASK_USER), keeps the exception's ``state`` with the paused run,
and on the user's answer calls ``resume`` with that state; it returns the call's result or raises
``InputRequired`` again.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from shared.llm.base import ToolSpec
from shared.protocol import ArtifactData, UserContext


@dataclass(frozen=True, slots=True)
class ToolContext:
    session_id: str
    run_id: str
    user_context: UserContext


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A result for the model, and what the call made for the user beside it."""

    result: Any
    artifacts: tuple[ArtifactData, ...] = ()


class ToolError(Exception):
    """A failure the model is told about (bad arguments, nothing found, limit exceeded)."""


class InputRequired(Exception):
    """The call cannot go on without the user: the run asks ``question`` (ASK_USER, kind question)
    and pauses. ``state`` (JSON) is stored with the paused run and handed to ``Tool.resume``."""

    def __init__(self, question: str, state: dict[str, Any]) -> None:
        super().__init__(question)
        self.question = question
        self.state = state


@dataclass(frozen=True, slots=True)
class UserReply:
    """The user's answer to a tool's question: its text, or a refusal to answer (``declined``)."""

    text: str
    declined: bool = False


def required_text(args: dict[str, Any], key: str, max_chars: int) -> str:
    """The string argument ``key``, not blank and at most ``max_chars`` long, stripped."""
    value = args.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"'{key}' (a non-empty string) is required")
    if len(value) > max_chars:
        raise ToolError(f"'{key}' is too long (at most {max_chars} characters)")
    return value.strip()


class Tool(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    parameters: ClassVar[dict[str, Any]]
    # Whether calling it again with the same arguments is harmless (reads, pure functions). A run
    # continued after a crash repeats a call whose outcome is unknown only for such a tool; any other
    # is not repeated and the model is told its outcome is unknown. An MCP tool takes it from its
    # ``idempotentHint``. Off unless a tool says so: repeating an effect is the costly mistake.
    idempotent: ClassVar[bool] = False
    # Longest one call may take; None: the service's AGENT_SERVICE_TOOL_TIMEOUT_SECONDS (an MCP
    # tool takes its server's). A call waiting for the user is not timed while it waits.
    timeout_s: ClassVar[float | None] = None
    # The MCP server the tool comes from (named in hooks, the audit log and traces); None: built in.
    server: ClassVar[str | None] = None

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    @abstractmethod
    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any: ...

    async def resume(self, args: dict[str, Any], state: dict[str, Any], reply: UserReply, ctx: ToolContext) -> Any:
        """Go on with a call that raised ``InputRequired``, with the user's ``reply``."""
        raise ToolError(f"{self.name} asked nothing it can take an answer to")
