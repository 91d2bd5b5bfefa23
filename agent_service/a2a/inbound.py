"""What an A2A message asks of the agent: its text, the skill, the user it acts for.

The agent reads text: text parts as they are, data parts as their JSON, files as
``attachments`` gives them (a text file inline, another named). A client that accepts no text back
is refused with ContentTypeNotSupportedError (the answer is text; files and data its tools make
come beside it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from pydantic import ValidationError

from agent_service.a2a.attachments import file_text
from agent_service.a2a.errors import ContentTypeNotSupported, InvalidParams, PushNotificationNotSupported
from agent_service.a2a.schemas import Message, Part, Role, SendMessageRequest
from shared.protocol import UserContext

# What the agent reads (a text part of these media types, or a data part; files of the types
# AGENT_SERVICE_A2A_FILE_TYPES accepts besides) and writes: its answer, and data (its tools' calls
# and results, emit_data); files its tools write are of their own types.
INPUT_MODES = ("text/plain", "application/json")
OUTPUT_MODES = ("text/plain", "application/json")
_TEXT_TYPES = ("text/", "application/json")
_ACCEPTS_TEXT = frozenset({"text/plain", "text/*", "text", "*/*", "text/markdown"})


def check_request(request: SendMessageRequest) -> None:
    """What a SendMessage asks that this agent cannot do, refused before anything starts."""
    config = request.configuration
    if config.task_push_notification_config is not None:
        raise PushNotificationNotSupported("this agent sends no push notifications; stream or poll the task")
    if config.accepted_output_modes and not _ACCEPTS_TEXT.intersection(m.lower() for m in config.accepted_output_modes):
        raise ContentTypeNotSupported(
            f"this agent's answer is text (text/plain); the request accepts only "
            f"{', '.join(config.accepted_output_modes)}"
        )
    if request.message.role is not Role.USER:
        raise InvalidParams("a message to the agent has the role ROLE_USER")


def message_text(message: Message, file_types: Sequence[str]) -> str:
    """The message as the agent reads it: its parts, one after another; files of ``file_types``."""
    return "\n".join(_part_text(part, file_types) for part in message.parts)


def _part_text(part: Part, file_types: Sequence[str]) -> str:
    if part.text is not None:
        if part.media_type and not part.media_type.lower().startswith(_TEXT_TYPES):
            raise ContentTypeNotSupported(f"a text part of type {part.media_type} is not supported")
        return part.text
    if part.data is not None:
        return orjson.dumps(part.data).decode()
    return file_text(part, file_types)


def approval_of(message: Message) -> bool | None:
    """An explicit decision on an approval question: a data part ``{"approved": true|false}``."""
    for part in message.parts:
        if isinstance(part.data, dict) and isinstance(part.data.get("approved"), bool):
            return part.data["approved"]
    return None


def skill_of(request: SendMessageRequest, default: str) -> str:
    """The profile to run: ``skillId`` in the request's or the message's metadata names one."""
    for metadata in (request.metadata, request.message.metadata):
        skill = (metadata or {}).get("skillId")
        if skill is not None:
            if not isinstance(skill, str) or not skill:
                raise InvalidParams("metadata.skillId names a skill of the Agent Card")
            return skill
    return default


def user_of(request: SendMessageRequest, default_user: str) -> UserContext | None:
    """Who the request says the run acts for: ``userId``/``orgId`` in its metadata, ``default_user``
    where it names an organisation only (None: it names no one). Whether the caller may act for that
    user is the caller's rule (``Caller.acting_for``)."""
    metadata: dict[str, Any] = request.metadata or {}
    if "userId" not in metadata and "orgId" not in metadata:
        return None
    try:
        return UserContext(user_id=metadata.get("userId", default_user), org_id=metadata.get("orgId"))
    except ValidationError as exc:
        raise InvalidParams(f"metadata.userId/orgId: {exc.errors()[0]['msg']}") from None
