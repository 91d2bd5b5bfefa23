"""The A2A error vocabulary, and how each binding renders it.

Every error an A2A route answers with is an ``A2AError``: the A2A error type (spec 3.3.2), its
JSON-RPC code, HTTP status and ``google.rpc.ErrorInfo`` reason (spec 5.4). JSON-RPC puts the
ErrorInfo in ``error.data``, HTTP+JSON in the AIP-193 body's ``error.details``. Errors of the
Agent Service's own vocabulary that reach the A2A layer are translated in one place,
``from_service_error``.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from agent_service.errors import (
    AgentServiceError,
    Forbidden,
    MessageTooLarge,
    ProfileNotFound,
    QuestionExpired,
    QuestionPending,
    RunInProgress,
    SessionNotFound,
)

ERROR_DOMAIN = "a2a-protocol.org"
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
# google.rpc.Code names of the HTTP statuses we answer with (AIP-193 ``status``).
_STATUS_NAMES = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 409: "FAILED_PRECONDITION",
    413: "INVALID_ARGUMENT", 415: "INVALID_ARGUMENT", 500: "INTERNAL", 503: "UNAVAILABLE",
}


class A2AError(Exception):
    """``reason`` is None for the plain JSON-RPC errors (parse, request, method, params, internal)."""

    jsonrpc_code: int = -32603
    http_status: int = 500
    reason: str | None = None
    domain: str = ERROR_DOMAIN

    def __init__(self, message: str, **metadata: str) -> None:
        super().__init__(message)
        self.message = message
        # ErrorInfo metadata: string values only (google.rpc.ErrorInfo).
        self.metadata = metadata

    def details(self) -> list[dict[str, Any]]:
        if self.reason is None:
            return []
        info: dict[str, Any] = {"@type": _ERROR_INFO, "reason": self.reason, "domain": self.domain}
        if self.metadata:
            info["metadata"] = self.metadata
        return [info]

    def jsonrpc(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` object."""
        error: dict[str, Any] = {"code": self.jsonrpc_code, "message": self.message}
        details = self.details()
        if details:
            error["data"] = details
        return error

    def rest_body(self) -> dict[str, Any]:
        """The AIP-193 body of the HTTP+JSON binding."""
        error: dict[str, Any] = {
            "code": self.http_status, "status": _STATUS_NAMES.get(self.http_status, "UNKNOWN"), "message": self.message,
        }
        details = self.details()
        if details:
            error["details"] = details
        return {"error": error}

    def rest_response(self) -> JSONResponse:
        return JSONResponse(self.rest_body(), status_code=self.http_status)


class TaskNotFound(A2AError):
    jsonrpc_code, http_status, reason = -32001, 404, "TASK_NOT_FOUND"


class TaskNotCancelable(A2AError):
    jsonrpc_code, http_status, reason = -32002, 409, "TASK_NOT_CANCELABLE"


class PushNotificationNotSupported(A2AError):
    jsonrpc_code, http_status, reason = -32003, 400, "PUSH_NOTIFICATION_NOT_SUPPORTED"


class UnsupportedOperation(A2AError):
    jsonrpc_code, http_status, reason = -32004, 400, "UNSUPPORTED_OPERATION"


class ContentTypeNotSupported(A2AError):
    jsonrpc_code, http_status, reason = -32005, 415, "CONTENT_TYPE_NOT_SUPPORTED"


class VersionNotSupported(A2AError):
    jsonrpc_code, http_status, reason = -32009, 400, "VERSION_NOT_SUPPORTED"


class ParseError(A2AError):
    jsonrpc_code, http_status = -32700, 400


class InvalidRequest(A2AError):
    jsonrpc_code, http_status = -32600, 400


class MethodNotFound(A2AError):
    jsonrpc_code, http_status = -32601, 404


class InvalidParams(A2AError):
    jsonrpc_code, http_status = -32602, 400


class InternalError(A2AError):
    jsonrpc_code, http_status = -32603, 500


class Unauthenticated(A2AError):
    """No A2A error type: the spec leaves it to the binding (HTTP 401, a JSON-RPC server error in
    the implementation-defined range), so its ErrorInfo is in this service's domain, not A2A's."""

    jsonrpc_code, http_status, reason, domain = -32000, 401, "UNAUTHENTICATED", "agent-service.taskforce"


class PermissionDenied(A2AError):
    """The caller is known but may not do this (act for another user or organisation, or use A2A at
    all); spec 3.3.2's authorization error. A task it may not see is TaskNotFound instead."""

    jsonrpc_code, http_status, reason, domain = -32000, 403, "PERMISSION_DENIED", "agent-service.taskforce"


class IdentityProviderDown(A2AError):
    """A bearer token could not be checked: the identity provider's keys cannot be read (retry)."""

    jsonrpc_code, http_status, reason, domain = -32000, 503, "IDENTITY_PROVIDER_UNAVAILABLE", "agent-service.taskforce"


def no_push_notifications() -> A2AError:
    return PushNotificationNotSupported("this agent sends no push notifications; stream or poll the task")


def no_extended_card() -> A2AError:
    return UnsupportedOperation("this agent has no extended Agent Card")


def from_service_error(exc: AgentServiceError) -> A2AError:
    """The A2A error for an error of the Agent Service's own vocabulary."""
    detail = exc.detail if isinstance(exc.detail, str) else _message_of(exc.detail) or exc.error
    if isinstance(exc, ProfileNotFound):
        return InvalidParams(f"unknown skill: {detail}")
    if isinstance(exc, SessionNotFound):
        return TaskNotFound(detail)
    if isinstance(exc, Forbidden):
        return PermissionDenied(detail)
    if isinstance(exc, MessageTooLarge):
        return InvalidParams(detail)
    if isinstance(exc, QuestionExpired):
        return UnsupportedOperation(detail)
    # One task at a time per context (its session's runs are sequential).
    if isinstance(exc, QuestionPending):
        return UnsupportedOperation(
            "the context's task waits for input: answer it with a message carrying its taskId, or cancel it"
        )
    if isinstance(exc, RunInProgress):
        return UnsupportedOperation("the context's task is working: wait for it to end, or cancel it")
    if exc.status_code == 409:
        return UnsupportedOperation(detail)
    if exc.status_code < 500:
        return InvalidParams(detail)
    return InternalError("the agent could not take the request")


def _message_of(detail: Any) -> str | None:
    if isinstance(detail, dict) and isinstance(detail.get("message"), str):
        return detail["message"]
    return None
