"""The WebSocket frame: ``{type, seq, conversation_id, data}``.

``seq`` is per conversation and strictly increasing; a reconnecting client passes the last seq it
saw as ``?after_seq=N``. Frame types are added, never renamed; clients ignore types they do not
know. Control frames (``pong``, ``ack``, ``error``) answer one client only and carry no seq.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson


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
    # The user asked for another answer in place of this one (regenerate, retry): pages drop it;
    # it stays in the stored history as ``replaced``. The new answer follows as a new message.
    MESSAGE_REPLACED = "message.replaced"
    NOTICE = "notice"
    # The owner deleted the conversation: its other open pages close it.
    CONVERSATION_DELETED = "conversation.deleted"


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
