"""The Agent Service wire contract (v1), shared by the service and every client.

Everything that crosses the boundary between the ConversationService and the Agent Service is
defined here: the execute request, the SSE event envelope, one payload model per event type and
the session statuses. Both sides validate with these models, so an event the Agent Service sends
is checked again by the client as untrusted input.

New event types and fields may be added; existing ones are never renamed or removed.
"""

from __future__ import annotations

import binascii
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

# Bounds that keep one request from exhausting the service. The message limit itself is a
# setting of the Agent Service (413 above it); these are the hard outer caps of the contract.
MAX_HISTORY_MESSAGES = 1_000
MAX_CONTENT_CHARS = 200_000
MAX_ID_CHARS = 128


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Role
    content: Annotated[str, Field(max_length=MAX_CONTENT_CHARS)]


class UserContext(BaseModel):
    """Who the agent acts for; tools use it for security filtering."""

    model_config = ConfigDict(extra="forbid")

    user_id: Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]
    org_id: Annotated[str | None, Field(max_length=MAX_ID_CHARS)] = None
    permissions: Annotated[list[Annotated[str, Field(max_length=MAX_ID_CHARS)]], Field(max_length=100)] = []


class Answer(BaseModel):
    """The user's reply to a pending ASK_USER; resumes the paused run.

    For a question of kind ``approval`` the text is read as a decision: ``approve``/``yes`` runs the
    tool, anything else refuses it. ``approved`` may be sent instead to say it explicitly. On a
    question a tool asked (an MCP server's), ``approved: false`` declines to answer it.
    """

    model_config = ConfigDict(extra="forbid")

    question_id: Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]
    text: Annotated[str, Field(max_length=MAX_CONTENT_CHARS)] = ""
    approved: bool | None = None


# What the schema of ExecuteRequest adds to its fields: a request is a message (not blank), or an
# answer to a paused session; anything else is refused 422. Checked in the Agent Service
# (runs/validation.py); said here so that the OpenAPI document allows only what is accepted.
_MESSAGE_OR_ANSWER: dict[str, Any] = {
    "anyOf": [
        {"properties": {"answer": {"type": "null"}, "message": {"pattern": r"\S"}}, "required": ["message"]},
        {"properties": {"answer": {"type": "object"}, "session_id": {"type": "string"}},
         "required": ["answer", "session_id"]},
    ]
}


class ExecuteRequest(BaseModel):
    """Body of ``POST /api/v1/agent/execute``: a new message, or the answer to a paused session's question."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_MESSAGE_OR_ANSWER)

    session_id: Annotated[str | None, Field(min_length=1, max_length=MAX_ID_CHARS)] = None
    profile_name: Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)] = "default"
    message: Annotated[str, Field(max_length=MAX_CONTENT_CHARS)] = ""
    chat_history: Annotated[list[ChatMessage], Field(max_length=MAX_HISTORY_MESSAGES)] = []
    user_context: UserContext
    answer: Answer | None = None
    metadata: dict[str, Any] = {}

    @field_validator("metadata")
    @classmethod
    def _small_metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        if len(value) > 50:
            raise ValueError("metadata may hold at most 50 keys")
        return value


class EventType(StrEnum):
    THOUGHT = "THOUGHT"
    # Clients must not count on one event per model token: ANSWER_CHUNK (and THOUGHT) carry what the
    # model streamed within a short budget, as one event (``AnswerChunkData``).
    TOOL_START = "TOOL_START"
    TOOL_END = "TOOL_END"
    ANSWER_CHUNK = "ANSWER_CHUNK"
    ASK_USER = "ASK_USER"
    COMPLETE = "COMPLETE"
    ERROR = "ERROR"
    # The run waits for room in a rate limit before its next model call (non-terminal).
    WAITING = "WAITING"
    # Something a tool made for the user beside the answer: a file, a link, data (non-terminal).
    ARTIFACT = "ARTIFACT"
    # The run goes on after the process running it died, from its last checkpoint (non-terminal):
    # the run's answer text after ``checkpoint_seq`` was cut off and is dropped (``RunResumedData``).
    RUN_RESUMED = "RUN_RESUMED"


# Events after which a run's stream ends: the run finished, failed or paused for the user.
TERMINAL_EVENT_TYPES = frozenset({EventType.COMPLETE, EventType.ERROR, EventType.ASK_USER})


class ThoughtData(BaseModel):
    text: str
    step: int | None = None


class ToolStartData(BaseModel):
    call_id: str
    tool: str
    args: dict[str, Any] = {}


class ToolEndData(BaseModel):
    call_id: str
    tool: str | None = None
    ok: bool
    result: Any = None
    error: str | None = None
    duration_ms: float


class AnswerChunkData(BaseModel):
    """More of the answer's text. One chunk is what the model streamed within the Agent Service's
    ``STREAM_COALESCE_MS`` (25 ms by default): it may hold many tokens (a fast model's, a burst read
    at once) or one; the first chunk of a run is its first token alone. The answer is the chunks'
    text concatenated, whatever their number."""

    text: str


class WaitingData(BaseModel):
    """Why the run waits and for how long (seconds from the event's ``ts``); it carries on by itself."""

    reason: str
    wait_s: Annotated[float, Field(ge=0)]
    # Which budget is spent: requests, input_tokens or output_tokens.
    limit: str | None = None


class RunResumedData(BaseModel):
    """A run continued after the process running it died: it picks up from its last checkpoint, the
    end of a step, under the same run and session, at the session's next seq.

    The step that was cut (a model turn in flight, a tool call) is done again, so its events before
    this one are superseded: a client drops the run's ``ANSWER_CHUNK`` text after ``checkpoint_seq``,
    i.e. keeps the first ``answer_chars`` characters of the run's answer text, and appends the chunks
    that follow. Both say the same; use whichever the client keeps (chunks by seq, or the text). A
    tool call whose outcome is unknown and that is not repeated ends with a TOOL_END (``ok: false``)
    after this event.
    """

    # The seq of the run's last event that stands (its first seq - 1 when no step had ended).
    checkpoint_seq: Annotated[int, Field(ge=0)]
    # The length of the run's answer text that stands (Python characters, as ``len``).
    answer_chars: Annotated[int, Field(ge=0)]
    # How many times the run has been continued, this time included.
    continuation: Annotated[int, Field(ge=1)] = 1
    # The steps (model turns) the run had completed.
    step: Annotated[int, Field(ge=0)] = 0


class AskUserKind(StrEnum):
    QUESTION = "question"
    APPROVAL = "approval"


class AskUserData(BaseModel):
    question_id: str
    question: str
    expires_at: datetime
    kind: AskUserKind = AskUserKind.QUESTION
    # For kind=approval: the tool call waiting for a decision.
    tool: str | None = None
    args: dict[str, Any] | None = None


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    llm_calls: int = 0
    tool_calls: int = 0


class CompleteData(BaseModel):
    answer: str
    usage: Usage = Usage()
    # The agent answered with a direct reply (its ``reply`` tool): a simple exchange with nothing
    # to follow, which A2A hands back as a Message. Absent when false, so a COMPLETE reads as it did.
    direct: bool = False

    @model_serializer(mode="wrap")
    def _without_false_direct(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if not data.get("direct"):
            data.pop("direct", None)
        return data


class ErrorCode(StrEnum):
    LLM_UNAVAILABLE = "LLM_UNAVAILABLE"
    LLM_ERROR = "LLM_ERROR"
    MAX_STEPS_EXCEEDED = "MAX_STEPS_EXCEEDED"
    TOKEN_LIMIT_EXCEEDED = "TOKEN_LIMIT_EXCEEDED"
    TOOL_ERROR = "TOOL_ERROR"
    CANCELLED = "CANCELLED"
    INTERRUPTED = "INTERRUPTED"  # the process running the run stopped (crash, restart)
    QUESTION_EXPIRED = "QUESTION_EXPIRED"
    RATE_LIMITED = "RATE_LIMITED"  # a rate limit would have made the run wait too long; see retry_after_s
    STORAGE_UNAVAILABLE = "STORAGE_UNAVAILABLE"  # the database stayed away too long: the run's events are not all saved
    INTERNAL = "INTERNAL"


class ErrorData(BaseModel):
    code: str
    message: str
    retryable: bool = False
    # When a retry may succeed, in seconds from the event's ``ts`` (RATE_LIMITED); absent otherwise,
    # so errors without it read on the wire as they always did.
    retry_after_s: float | None = None

    @model_serializer(mode="wrap")
    def _without_absent_retry(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if data.get("retry_after_s") is None:
            data.pop("retry_after_s", None)
        return data


# The hard outer cap of one artifact's content in bytes (a file's, or a JSON object's serialised);
# the Agent Service's setting caps lower. Its base64 stays well inside a client's 1 MiB event limit.
MAX_ARTIFACT_BYTES = 512 * 1024
MAX_URL_CHARS = 2048
_MAX_BASE64_CHARS = 4 * ((MAX_ARTIFACT_BYTES + 2) // 3)
# What a client may do with an artifact's link: open it in a browser, nothing else (no javascript:).
ARTIFACT_URL_SCHEMES = frozenset({"http", "https"})


class ArtifactData(BaseModel):
    """Something a tool made for the user, beside the answer; exactly one of: ``text`` (a text
    file's content), ``bytes`` (a file's content, base64), ``url`` (a link to it) or ``data`` (a JSON
    object). ``call_id``: the tool call that made it."""

    artifact_id: Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]
    name: Annotated[str, Field(min_length=1, max_length=255)]
    media_type: Annotated[str, Field(min_length=3, max_length=255)]
    call_id: Annotated[str | None, Field(max_length=MAX_ID_CHARS)] = None
    description: Annotated[str | None, Field(max_length=1000)] = None
    text: Annotated[str | None, Field(max_length=MAX_ARTIFACT_BYTES)] = None
    bytes: Annotated[str | None, Field(max_length=_MAX_BASE64_CHARS)] = None
    url: Annotated[str | None, Field(max_length=MAX_URL_CHARS)] = None
    data: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_content(self) -> ArtifactData:
        present = [name for name in ("text", "bytes", "url", "data") if getattr(self, name) is not None]
        if len(present) != 1:
            raise ValueError(f"an artifact holds exactly one of text, bytes, url, data (got {present or 'none'})")
        if self.bytes is not None:
            try:
                binascii.a2b_base64(self.bytes, strict_mode=True)
            except binascii.Error:
                raise ValueError("bytes is not base64") from None
        if self.url is not None and urlsplit(self.url).scheme.lower() not in ARTIFACT_URL_SCHEMES:
            raise ValueError("url is an http or https link")
        return self

    @model_serializer(mode="wrap")
    def _only_present(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {key: value for key, value in handler(self).items() if value is not None}


EVENT_DATA_MODELS: dict[EventType, type[BaseModel]] = {
    EventType.THOUGHT: ThoughtData,
    EventType.TOOL_START: ToolStartData,
    EventType.TOOL_END: ToolEndData,
    EventType.ANSWER_CHUNK: AnswerChunkData,
    EventType.ASK_USER: AskUserData,
    EventType.COMPLETE: CompleteData,
    EventType.ERROR: ErrorData,
    EventType.WAITING: WaitingData,
    EventType.ARTIFACT: ArtifactData,
    EventType.RUN_RESUMED: RunResumedData,
}


class EventEnvelope(BaseModel):
    """The JSON ``data:`` of every SSE event; ``seq`` is also the SSE ``id:``.

    ``seq`` grows strictly within a session and names one event forever. It is dense except after a
    crash of the Agent Service mid-run: the events it had shown but not written are gone, and the
    RUN_RESUMED that continues the run (or the ERROR that ends it) comes after every seq the run had
    reserved, so a reader may see a jump (and a ``Last-Event-ID`` inside the hole gets that event).
    Readers accept it.
    """

    session_id: str
    run_id: str
    seq: Annotated[int, Field(ge=1)]
    type: EventType
    ts: datetime
    data: dict[str, Any]

    def payload(self) -> BaseModel:
        """The typed payload; raises ``pydantic.ValidationError`` when it does not match its type."""
        return EVENT_DATA_MODELS[self.type].model_validate(self.data)

    @property
    def is_terminal(self) -> bool:
        return self.type in TERMINAL_EVENT_TYPES


class SessionStatus(StrEnum):
    ACTIVE = "ACTIVE"
    AWAITING_USER = "AWAITING_USER"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TERMINAL_SESSION_STATUSES = frozenset({SessionStatus.COMPLETED, SessionStatus.FAILED, SessionStatus.CANCELLED})


class PendingQuestion(BaseModel):
    question_id: str
    question: str
    expires_at: datetime
    kind: AskUserKind = AskUserKind.QUESTION
    tool: str | None = None
    args: dict[str, Any] | None = None


class SessionStatusResponse(BaseModel):
    """Body of ``GET /api/v1/agent/sessions/{id}``."""

    session_id: str
    profile_name: str
    status: SessionStatus
    pending_question: PendingQuestion | None = None
    last_seq: int
    current_run_id: str | None = None
    created_at: datetime
    updated_at: datetime


class ProfileInfo(BaseModel):
    name: str
    description: str = ""
    model: str | None = None
    tools: list[str] = []
    max_steps: int


class MemoryItem(BaseModel):
    """One thing the agent remembers about a user (a completed turn)."""

    id: int
    content: str
    created_at: datetime
    session_id: str | None = None


class MemoryList(BaseModel):
    """Body of ``GET /api/v1/agent/memory``: the owner's memories, newest first."""

    items: list[MemoryItem]


class MemoryDeleted(BaseModel):
    deleted: int


class ErrorBody(BaseModel):
    """Every non-2xx JSON response of both services."""

    error: str
    detail: Any = None


def utcnow() -> datetime:
    return datetime.now(UTC)
