"""The WebSocket frame: ``{type, seq, conversation_id, data}``.

``seq`` is per conversation and strictly increasing; a reconnecting client passes the last seq it
saw as ``?after_seq=N``. Frame types are added, never renamed; clients ignore types they do not
know. Control frames (``pong``, ``ack``, ``error``) answer one client only and carry no seq.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson

from shared.protocol import ArtifactData


class FrameType:
    MESSAGE_CREATED = "message.created"
    MESSAGE_DELTA = "message.delta"
    MESSAGE_COMPLETED = "message.completed"
    # A reply ended without its answer (the LLM or the agent failed, or the replica streaming it
    # died and the reply could not be resumed): the message is marked error, the user sees why.
    MESSAGE_ERROR = "message.error"
    AGENT_THINKING = "agent.thinking"
    AGENT_TOOL_START = "agent.tool_start"
    AGENT_TOOL_END = "agent.tool_end"
    AGENT_ASK_USER = "agent.ask_user"
    AGENT_COMPLETE = "agent.complete"
    AGENT_ERROR = "agent.error"
    # The agent waits for room in a rate limit: reason, wait_s and until (when it carries on).
    AGENT_WAITING = "agent.waiting"
    # Something the agent made for the user beside its answer: a file, a link or data.
    AGENT_ARTIFACT = "agent.artifact"
    # The user asked for another answer in place of this one (regenerate, retry): pages drop it;
    # it stays in the stored history as ``replaced``. The new answer follows as a new message.
    MESSAGE_REPLACED = "message.replaced"
    NOTICE = "notice"
    # The owner deleted the conversation: its other open pages close it.
    CONVERSATION_DELETED = "conversation.deleted"


class FrameData:
    """The ``data`` of one frame type: each subclass is one type (``TYPE``), its fields the keys its
    data has, so a field cannot be misspelt at one of the places that send it; the page's reading of
    them is checked against these classes (tests/unit/conversation_service/realtime)."""

    __slots__ = ()
    TYPE: ClassVar[str]

    def data(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class MessageCreated(FrameData):
    """A message as the API shows it (``MessageOut``), user's or assistant's."""

    TYPE: ClassVar[str] = FrameType.MESSAGE_CREATED
    message: dict[str, Any]

    def data(self) -> dict[str, Any]:
        return self.message


@dataclass(frozen=True, slots=True)
class MessageDelta(FrameData):
    """More text of a streaming reply. ``offset``: where it starts in the message (agent replies: a
    chunk sent again after a takeover replaces rather than repeats); absent on direct replies."""

    TYPE: ClassVar[str] = FrameType.MESSAGE_DELTA
    message_id: str
    text: str
    offset: int | None = None

    def data(self) -> dict[str, Any]:
        if self.offset is None:
            return {"message_id": self.message_id, "text": self.text}
        return {"message_id": self.message_id, "text": self.text, "offset": self.offset}


def with_delta(text: str, delta: str, offset: object) -> str:
    """A message's ``text`` after one of its ``message.delta`` frames: the delta's text from its
    ``offset`` on when it has one inside the text (what was there is replaced: a chunk sent again after
    a takeover, or a cut when the agent restarted a step), else appended."""
    if isinstance(offset, int) and 0 <= offset < len(text):
        return text[:offset] + delta
    return text + delta


@dataclass(frozen=True, slots=True)
class MessageCompleted(FrameData):
    """A reply's end with its whole text; ``status`` complete, or stopped (the user stopped it)."""

    TYPE: ClassVar[str] = FrameType.MESSAGE_COMPLETED
    message_id: str
    content: str
    status: str


@dataclass(frozen=True, slots=True)
class MessageError(FrameData):
    """A reply's end without its answer: why (``code`` for programs, ``text`` for the user), the text
    it had, and whether asking again may help."""

    TYPE: ClassVar[str] = FrameType.MESSAGE_ERROR
    message_id: str
    code: str
    text: str
    content: str
    retryable: bool


@dataclass(frozen=True, slots=True)
class MessageReplaced(FrameData):
    TYPE: ClassVar[str] = FrameType.MESSAGE_REPLACED
    message_id: str
    in_reply_to: str


@dataclass(frozen=True, slots=True)
class AgentThinking(FrameData):
    TYPE: ClassVar[str] = FrameType.AGENT_THINKING
    message_id: str
    text: str
    step: int


@dataclass(frozen=True, slots=True)
class AgentToolStart(FrameData):
    TYPE: ClassVar[str] = FrameType.AGENT_TOOL_START
    message_id: str
    call_id: str
    tool: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AgentToolEnd(FrameData):
    TYPE: ClassVar[str] = FrameType.AGENT_TOOL_END
    message_id: str
    call_id: str
    tool: str | None
    ok: bool
    duration_ms: float
    error: str | None
    result_preview: str | None


@dataclass(frozen=True, slots=True)
class AgentWaiting(FrameData):
    """The reply waits (a rate limit, or the service's capacity): why, for how long, until when."""

    TYPE: ClassVar[str] = FrameType.AGENT_WAITING
    message_id: str
    reason: str
    wait_s: float
    limit: str | None
    until: str


@dataclass(frozen=True, slots=True)
class AgentArtifact(FrameData):
    """Something the agent made for the user beside its answer (an ARTIFACT event): a file
    (``text``, or ``bytes`` in base64), a link (``url``, http or https) or data (``json``, an
    object); exactly one of the four is sent, and ``description`` when there is one."""

    TYPE: ClassVar[str] = FrameType.AGENT_ARTIFACT
    message_id: str
    artifact_id: str
    name: str
    media_type: str
    description: str | None = None
    text: str | None = None
    bytes: str | None = None
    url: str | None = None
    json: dict[str, Any] | None = None

    @classmethod
    def of(cls, message_id: str, artifact: ArtifactData) -> AgentArtifact:
        return cls(message_id, artifact.artifact_id, artifact.name, artifact.media_type, artifact.description,
                   artifact.text, artifact.bytes, artifact.url, artifact.data)

    def data(self) -> dict[str, Any]:
        return {name: value for name in self.__slots__ if (value := getattr(self, name)) is not None}


@dataclass(frozen=True, slots=True)
class AgentAskUser(FrameData):
    TYPE: ClassVar[str] = FrameType.AGENT_ASK_USER
    message_id: str
    question_id: str
    question: str
    kind: str
    expires_at: str
    tool: str | None
    args: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class AgentComplete(FrameData):
    TYPE: ClassVar[str] = FrameType.AGENT_COMPLETE
    message_id: str
    agent_session_id: str
    usage: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AgentError(FrameData):
    TYPE: ClassVar[str] = FrameType.AGENT_ERROR
    message_id: str
    code: str
    message: str
    retryable: bool


@dataclass(frozen=True, slots=True)
class Notice(FrameData):
    """Something the user should know that is not a message (a fallback, an expired question...).
    ``question_id``: the question it is about, when it is about one; ``message_id``: the reply it is
    about, when it is about one (the agent restarted a step of it)."""

    TYPE: ClassVar[str] = FrameType.NOTICE
    code: str
    text: str
    question_id: str | None = None
    message_id: str | None = None

    def data(self) -> dict[str, Any]:
        data = {"code": self.code, "text": self.text}
        if self.question_id is not None:
            data["question_id"] = self.question_id
        if self.message_id is not None:
            data["message_id"] = self.message_id
        return data


@dataclass(frozen=True, slots=True)
class ConversationDeleted(FrameData):
    TYPE: ClassVar[str] = FrameType.CONVERSATION_DELETED
    conversation_id: str


# Every frame type's data class, by type.
FRAME_DATA: dict[str, type[FrameData]] = {
    cls.TYPE: cls for cls in (
        MessageCreated, MessageDelta, MessageCompleted, MessageError, MessageReplaced, AgentThinking,
        AgentToolStart, AgentToolEnd, AgentWaiting, AgentArtifact, AgentAskUser, AgentComplete, AgentError, Notice,
        ConversationDeleted,
    )
}


@dataclass(frozen=True, slots=True)
class TurnProgress:
    """How far a turn's reply has got, written with the frame that shows it (same transaction):
    a takeover resumes exactly after what the stored frames show. Never sent to clients."""

    turn_id: str
    message_id: str
    agent_session_id: str
    agent_seq: int  # the Agent Service event seq the frame reflects


@dataclass(frozen=True, slots=True)
class Frame:
    type: str
    seq: int
    conversation_id: str
    data: dict[str, Any]
    progress: TurnProgress | None = field(default=None, compare=False, repr=False)
    # The encoded frame, made on first use: a frame goes to every client of its conversation (and
    # to Redis), and is encoded once, not once per client.
    _text: str | None = field(default=None, init=False, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "seq": self.seq, "conversation_id": self.conversation_id, "data": self.data}

    def to_text(self) -> str:
        text = self._text
        if text is None:
            text = orjson.dumps(self.to_dict()).decode()
            object.__setattr__(self, "_text", text)  # frozen: the cache is the only late field
        return text

    def to_json(self) -> bytes:
        return self.to_text().encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> Frame:
        obj = orjson.loads(raw)
        return cls(type=obj["type"], seq=int(obj["seq"]), conversation_id=obj["conversation_id"], data=obj["data"])
