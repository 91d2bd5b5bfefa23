"""What a run is made of, as plain data: where it stands (``RunState``, persisted on the session when
it pauses, so a paused run resumes in another process, and at the end of each step, so a run whose
process died continues elsewhere: ``runs.checkpoints``), what it runs for (``RunContext``), the
user's reply it resumes with (``Resume``) and how it ended (``Outcome``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from agent_service.access.caller import Owner
from agent_service.profiles.schemas import Profile
from shared.llm.base import LLMMessage, ToolCall
from shared.protocol import AskUserKind, ErrorCode, ExecuteRequest, PendingQuestion, Usage, UserContext


@dataclass
class RunState:
    """Where a run stands; persisted on the session when it pauses."""

    transcript: list[LLMMessage]
    # Tool calls of the last model turn not executed yet (the first may be waiting for the user).
    pending_calls: list[ToolCall] = field(default_factory=list)
    steps: int = 0
    usage: Usage = field(default_factory=Usage)
    # Messages every prompt of this run carries after the transcript's leading system messages and
    # the transcript does not keep (recalled memory); not persisted: a resumed run recalls afresh.
    context: list[LLMMessage] = field(default_factory=list)
    # The run's answer text so far, as its ANSWER_CHUNKs said it. Each run answers anew (not kept
    # when it pauses); a checkpoint keeps it, so a continued run's COMPLETE holds the whole answer.
    answer: list[str] = field(default_factory=list)
    # The first pending call asked the user something mid-call (``tools.base.InputRequired``):
    # ``{"call_id", "state"}``, the tool's own state, handed back to it with the answer.
    tool_input: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        data = {
            "pending_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.pending_calls],
            "steps": self.steps,
            "usage": self.usage.model_dump(),
        }
        if self.tool_input is not None:
            data["tool_input"] = self.tool_input
        return data

    @classmethod
    def from_json(cls, transcript: list[dict[str, Any]], data: dict[str, Any] | None) -> RunState:
        data = data or {}
        return cls(
            transcript=[LLMMessage.from_dict(m) for m in transcript],
            pending_calls=[
                ToolCall(id=c["id"], name=c["name"], arguments=dict(c.get("arguments") or {}))
                for c in data.get("pending_calls", ())
            ],
            steps=int(data.get("steps", 0)),
            usage=Usage.model_validate(data.get("usage") or {}),
            tool_input=data.get("tool_input"),
        )

    @classmethod
    def first(cls, request: ExecuteRequest, system_prompt: str) -> RunState:
        """A new session's first run: the caller's chat history seeds it."""
        transcript = [LLMMessage(role="system", content=system_prompt)]
        transcript += [LLMMessage(role=m.role.value, content=m.content) for m in request.chat_history]
        transcript.append(LLMMessage(role="user", content=request.message))
        return cls(transcript=transcript)

    @classmethod
    def continued(cls, transcript: list[dict[str, Any]], request: ExecuteRequest) -> RunState:
        """A new message continues the session's own transcript (it holds the tool calls the
        caller's chat history does not)."""
        state = cls.from_json(transcript, None)
        state.transcript.append(LLMMessage(role="user", content=request.message))
        return state

    def transcript_json(self) -> list[dict[str, Any]]:
        return [m.to_dict() for m in self.transcript]


@dataclass(frozen=True)
class Resume:
    """The user's reply to the pending question, as the engine consumes it."""

    kind: AskUserKind
    text: str
    approved: bool
    # The user refused to answer (``approved: false`` on a question): a tool's question is declined.
    declined: bool = False


class Steps(Protocol):
    """Where the engine says a step ended (``ended``: the state is a checkpoint) and asks, before a
    tool call whose repetition is not harmless, that its TOOL_START be durable (``effect_ahead``:
    False when it could not be written, and the call is not made). ``runs.checkpoints``."""

    def ended(self, state: RunState) -> None: ...

    async def effect_ahead(self) -> bool: ...


class NoSteps:
    """Steps recorded nowhere: a run no crash can interrupt (tests of the engine alone)."""

    def ended(self, state: RunState) -> None:
        return None

    async def effect_ahead(self) -> bool:
        return True


NO_STEPS = NoSteps()


@dataclass(frozen=True)
class RunContext:
    session_id: str
    run_id: str
    profile: Profile
    user_context: UserContext
    # Who the session belongs to (``access``): whoever may reuse what this run leaves in memory.
    owner: Owner | None = None
    steps: Steps = NO_STEPS


@dataclass(frozen=True)
class Completed:
    answer: str
    usage: Usage
    # The model ended the run with a direct reply (the ``reply`` tool).
    direct: bool = False


@dataclass(frozen=True)
class Paused:
    question: PendingQuestion
    call_id: str


@dataclass(frozen=True)
class Failed:
    code: ErrorCode
    message: str
    # When the same request may succeed (RATE_LIMITED), in seconds.
    retry_after_s: float | None = None


Outcome = Completed | Paused | Failed


def as_text(value: Any) -> str:
    """A tool result or argument as the model reads it: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    return orjson.dumps(value, default=str).decode()


def answer_call(state: RunState, call: ToolCall, error: str) -> None:
    """Answer ``call`` in the transcript with ``error``, as the tool's failure would be."""
    state.transcript.append(
        LLMMessage(role="tool", content=as_text({"error": error}), tool_call_id=call.id, name=call.name)
    )


def close_pending_calls(state: RunState, reason: str) -> None:
    """Answer every pending call with ``reason``, so the transcript stays valid for a model that
    requires a tool result after each tool call (when a paused run is cancelled or expires)."""
    state.tool_input = None
    for call in state.pending_calls:
        answer_call(state, call, reason)
    state.pending_calls = []
