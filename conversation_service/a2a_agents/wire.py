"""What an A2A 1.0 agent sends, read as untrusted input: stream responses and errors.

A stream response (spec 3.2.3) holds exactly one of ``task``, ``message``, ``statusUpdate`` or
``artifactUpdate``, in ProtoJSON (camelCase; snake_case is accepted too). Each becomes one of the
small records below; anything malformed is an ``AgentProtocolError``. Errors, JSON-RPC's codes
(spec 5.4) and HTTP+JSON's statuses alike, become the ``AgentServiceError`` the rest of the chat
already handles (``replies.policy``: which fall back, which fail).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conversation_service.agent_client.errors import (
    AgentHTTPError,
    AgentProtocolError,
    AgentServiceError,
    error_class_for_status,
)
from shared.protocol import MAX_ID_CHARS

# Task states (spec 4.1.3), as ProtoJSON writes the enum.
SUBMITTED = "TASK_STATE_SUBMITTED"
WORKING = "TASK_STATE_WORKING"
COMPLETED = "TASK_STATE_COMPLETED"
FAILED = "TASK_STATE_FAILED"
CANCELED = "TASK_STATE_CANCELED"
REJECTED = "TASK_STATE_REJECTED"
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"
TERMINAL = frozenset({COMPLETED, FAILED, CANCELED, REJECTED})
# A SendStreamingMessage stream ends here too (the task waits for the client).
INTERRUPTED = frozenset({INPUT_REQUIRED, AUTH_REQUIRED})

# JSON-RPC error codes (spec 5.4) as the HTTP status HTTP+JSON gives the same error.
_JSONRPC_STATUS = {
    -32700: 400, -32600: 400, -32601: 404, -32602: 400, -32603: 500,
    -32001: 404,  # TaskNotFoundError
    -32002: 409,  # TaskNotCancelableError
    -32003: 400,  # PushNotificationNotSupportedError
    -32004: 400,  # UnsupportedOperationError
    -32005: 415,  # ContentTypeNotSupportedError
    -32006: 502,  # InvalidAgentResponseError
    -32007: 400,  # ExtendedAgentCardNotConfiguredError
    -32008: 400,  # ExtensionSupportRequiredError
    -32009: 400,  # VersionNotSupportedError
}
_MAX_TEXT = 2000


@dataclass(frozen=True, slots=True)
class Status:
    state: str
    text: str = ""  # the text of the status message, if any
    message_id: str | None = None
    timestamp: str | None = None


@dataclass(frozen=True, slots=True)
class Artifact:
    artifact_id: str
    name: str | None
    parts: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class TaskSnapshot:
    """A ``Task``: the first event of a stream, and what a subscription starts with."""

    task_id: str
    context_id: str
    status: Status
    artifacts: list[Artifact] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    task_id: str
    context_id: str
    status: Status


@dataclass(frozen=True, slots=True)
class ArtifactUpdate:
    task_id: str
    context_id: str
    artifact: Artifact
    append: bool
    last_chunk: bool


@dataclass(frozen=True, slots=True)
class DirectMessage:
    """A ``Message`` instead of a task: the whole answer, nothing to follow."""

    text: str
    context_id: str | None
    task_id: str | None
    parts: list[dict[str, Any]] = field(default_factory=list)


StreamEvent = TaskSnapshot | StatusUpdate | ArtifactUpdate | DirectMessage


def _get(obj: dict[str, Any], camel: str) -> Any:
    if camel in obj:
        return obj[camel]
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
    return obj.get(snake)


def _id(obj: dict[str, Any], camel: str, *, required: bool = True) -> str | None:
    value = _get(obj, camel)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS:
        raise AgentProtocolError(f"invalid A2A event: {camel} is not an id")
    return value


def _parts(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(p, dict) for p in value):
        raise AgentProtocolError("invalid A2A event: parts is not a list of objects")
    for part in value:
        if "text" in part and not isinstance(part["text"], str):
            raise AgentProtocolError("invalid A2A event: a text part's text is not a string")
    return value


def text_of(parts: list[dict[str, Any]]) -> str:
    """The text of a message's or an artifact's parts, in order (other parts have none)."""
    return "".join(p["text"] for p in parts if isinstance(p.get("text"), str))


def _status(value: Any) -> Status:
    if not isinstance(value, dict) or not isinstance(value.get("state"), str):
        raise AgentProtocolError("invalid A2A event: a status without its state")
    message = value.get("message")
    if message is not None and not isinstance(message, dict):
        raise AgentProtocolError("invalid A2A event: a status message is not an object")
    message = message or {}
    timestamp = value.get("timestamp")
    return Status(value["state"], text_of(_parts(message.get("parts"))), _id(message, "messageId", required=False),
                  timestamp if isinstance(timestamp, str) else None)


def _artifact(value: Any) -> Artifact:
    if not isinstance(value, dict):
        raise AgentProtocolError("invalid A2A event: an artifact is not an object")
    name = value.get("name")
    return Artifact(_id(value, "artifactId") or "", name if isinstance(name, str) else None,
                    _parts(value.get("parts")))


def parse_stream_response(obj: Any) -> StreamEvent:
    """One ``StreamResponse`` (or, from ``GetTask``, a bare ``Task``)."""
    if not isinstance(obj, dict):
        raise AgentProtocolError("invalid A2A event: not a JSON object")
    if isinstance(task := obj.get("task"), dict):
        return parse_task(task)
    if isinstance(update := _get(obj, "statusUpdate"), dict):
        return StatusUpdate(_id(update, "taskId") or "", _id(update, "contextId") or "", _status(update.get("status")))
    if isinstance(update := _get(obj, "artifactUpdate"), dict):
        return ArtifactUpdate(_id(update, "taskId") or "", _id(update, "contextId") or "",
                              _artifact(update.get("artifact")), _get(update, "append") is True,
                              _get(update, "lastChunk") is True)
    if isinstance(message := obj.get("message"), dict):
        parts = _parts(message.get("parts"))
        return DirectMessage(text_of(parts), _id(message, "contextId", required=False),
                             _id(message, "taskId", required=False), parts)
    raise AgentProtocolError("invalid A2A event: none of task, message, statusUpdate, artifactUpdate")


def parse_task(task: dict[str, Any]) -> TaskSnapshot:
    artifacts = task.get("artifacts") or []
    if not isinstance(artifacts, list):
        raise AgentProtocolError("invalid A2A task: artifacts is not a list")
    return TaskSnapshot(_id(task, "id") or "", _id(task, "contextId") or "", _status(task.get("status")),
                        [_artifact(a) for a in artifacts])


def jsonrpc_error(error: Any) -> AgentServiceError:
    """A JSON-RPC ``error`` object as the chat's error (its message cut short: it is the agent's)."""
    if not isinstance(error, dict) or not isinstance(error.get("code"), int):
        return AgentProtocolError("the A2A agent answered with an invalid JSON-RPC error")
    status = _JSONRPC_STATUS.get(error["code"], 500 if -32099 <= error["code"] <= -32000 else 400)
    message = error.get("message")
    return _http_error(status, str(error["code"]), message if isinstance(message, str) else None)


def http_error(status: int, body: Any) -> AgentServiceError:
    """An HTTP+JSON error answer (AIP-193 ``{"error": {"code", "status", "message"}}``)."""
    inner = body.get("error") if isinstance(body, dict) else None
    message = inner.get("message") if isinstance(inner, dict) else None
    reason = inner.get("status") if isinstance(inner, dict) else None
    return _http_error(status, reason if isinstance(reason, str) else None,
                       message if isinstance(message, str) else None)


def _http_error(status: int, error: str | None, message: str | None) -> AgentHTTPError:
    detail = message[:_MAX_TEXT] if message else None
    return error_class_for_status(status)(status, error, detail)
