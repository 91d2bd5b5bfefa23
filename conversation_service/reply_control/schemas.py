from __future__ import annotations

from pydantic import BaseModel

from conversation_service.messages.schemas import RouteOut


class StopAccepted(BaseModel):
    """202 body of ``POST .../messages/{id}/stop``: the reply ends ``stopped`` on the WebSocket
    (``message.completed`` with ``status: "stopped"``) and in the message list."""

    message_id: str
    status: str = "stopping"


class RegenerateAccepted(BaseModel):
    """202 body of ``POST .../messages/{id}/regenerate``: the new answer streams on the WebSocket."""

    replaced_message_id: str
    in_reply_to: str  # the user message answered again
    route: RouteOut
