"""What a hook is and what it receives.

A hook subclasses ``Hook`` and overrides the points it cares about; each point receives one object
with the loop's data at that moment. Two points may change what happens next: ``before_model_call``
may replace ``messages`` (the prompt of this one call; the run's transcript is left as it is) or
``options``, and ``before_tool`` may ``refuse`` the call with a reason, which the model reads as the
tool's error. Everything else is for observing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from shared.llm.base import CompletionOptions, LLMMessage, ToolCall
from shared.protocol import Usage


class HookPoint(StrEnum):
    RUN_START = "run_start"
    BEFORE_MODEL_CALL = "before_model_call"
    AFTER_MODEL_CALL = "after_model_call"
    BEFORE_TOOL = "before_tool"
    AFTER_TOOL = "after_tool"
    ANSWER_CHUNK = "answer_chunk"
    RUN_END = "run_end"


@dataclass(frozen=True, slots=True)
class RunInfo:
    """The run a hook is called for, and who it acts for."""

    session_id: str
    run_id: str
    profile: str
    user_id: str
    org_id: str | None


@dataclass(slots=True)
class RunStart:
    run: RunInfo
    message: str
    resumed: bool


@dataclass(slots=True)
class BeforeModelCall:
    run: RunInfo
    step: int
    messages: list[LLMMessage]
    options: CompletionOptions


@dataclass(slots=True)
class AfterModelCall:
    run: RunInfo
    step: int
    text: str
    tool_calls: list[ToolCall]
    duration_s: float


@dataclass(slots=True)
class BeforeTool:
    run: RunInfo
    call_id: str
    tool: str
    arguments: dict[str, Any]
    refusal: str | None = None
    # The MCP server the tool comes from; None: a built-in tool.
    server: str | None = None

    def refuse(self, reason: str) -> None:
        """The tool is not run; the model is told ``reason`` instead of its result."""
        self.refusal = reason


@dataclass(slots=True)
class AfterTool:
    run: RunInfo
    call_id: str
    tool: str
    arguments: dict[str, Any]
    ok: bool
    result: Any
    error: str | None
    duration_s: float
    server: str | None = None


@dataclass(slots=True)
class AnswerChunk:
    run: RunInfo
    text: str


@dataclass(slots=True)
class RunEnd:
    run: RunInfo
    # COMPLETE, ASK_USER or ERROR (with ``error_code``), as the run's terminal event will say.
    outcome: str
    error_code: str | None
    usage: Usage = field(default_factory=Usage)
    duration_s: float = 0.0


HookData = RunStart | BeforeModelCall | AfterModelCall | BeforeTool | AfterTool | AnswerChunk | RunEnd


class Hook:
    """Override the points you need; the others cost nothing (the runner skips them)."""

    @property
    def name(self) -> str:
        return type(self).__name__

    async def run_start(self, data: RunStart) -> None:
        return None

    async def before_model_call(self, data: BeforeModelCall) -> None:
        return None

    async def after_model_call(self, data: AfterModelCall) -> None:
        return None

    async def before_tool(self, data: BeforeTool) -> None:
        return None

    async def after_tool(self, data: AfterTool) -> None:
        return None

    async def answer_chunk(self, data: AnswerChunk) -> None:
        return None

    async def run_end(self, data: RunEnd) -> None:
        return None

    def implements(self, point: HookPoint) -> bool:
        return getattr(type(self), point.value) is not getattr(Hook, point.value)

    async def aclose(self) -> None:
        """Called once when the service stops."""
