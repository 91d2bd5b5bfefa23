from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.protocol import MAX_CONTENT_CHARS, MAX_ID_CHARS
from shared.storable import NUL


class MessageCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The outer cap of the contract; the configured, smaller limit answers 413.
    content: Annotated[str, Field(min_length=1, max_length=MAX_CONTENT_CHARS)]
    client_message_id: Annotated[str | None, Field(min_length=1, max_length=MAX_ID_CHARS, pattern=r"^[\x21-\x7e]+$")] = None

    @field_validator("content")
    @classmethod
    def _no_nul(cls, content: str) -> str:
        if NUL in content:
            # PostgreSQL cannot store it (shared.storable); refused, not changed: it is the user's own text.
            raise ValueError("content must not contain NUL characters")
        return content


class MessageOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    conversation_id: str
    role: str
    content: str
    status: str
    client_message_id: str | None = None
    created_at: datetime
    agent_session_id: str | None = None
    agent_metadata: dict[str, Any] | None = None
    # Only in message lists, on a message still streaming: ``content`` is its text so far, made of
    # its ``message.delta`` frames up to this seq; later deltas continue it, earlier ones are in it.
    content_seq: int | None = None


class MessageList(BaseModel):
    items: list[MessageOut]
    limit: int
    offset: int


class RouteOut(BaseModel):
    target: str
    reason: str


class MessageAccepted(BaseModel):
    """202 body of ``POST /conversations/{id}/messages``; the reply streams on the WebSocket."""

    message_id: str
    conversation_id: str
    route: RouteOut
    # True when this answers a repeat of an earlier ``client_message_id``: nothing was created.
    duplicate: bool = False


def message_frame_data(message: Any) -> dict[str, Any]:
    """The ``data`` of a ``message.created`` frame: the message as the API shows it."""
    return MessageOut.model_validate(message).model_dump(mode="json")
