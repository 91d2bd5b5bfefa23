"""The Agent Service's one error vocabulary.

Every error a route can return is an ``AgentServiceError`` subclass with its HTTP status; one
handler renders them as ``{"error": <name>, "detail": ...}``. The same classes name the SSE ``ERROR``
codes a run can end with (``error_code``), so HTTP and stream errors read alike.
"""

from __future__ import annotations

from typing import Any, ClassVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.body_limit import over_content_cap
from shared.http_contract import http_error, install_storage_errors
from shared.protocol import MAX_CONTENT_CHARS, ErrorBody, ErrorCode


class AgentServiceError(Exception):
    status_code: int = 500
    error: str = "internal_error"
    headers: dict[str, str] | None = None

    def __init__(self, detail: Any = None) -> None:
        super().__init__(detail)
        self.detail = detail


class Unauthorized(AgentServiceError):
    status_code = 401
    error = "unauthorized"
    # RFC 6750 3 (a bearer token is one of the accepted credentials, X-API-Key the other).
    headers: ClassVar[dict[str, str] | None] = {"WWW-Authenticate": 'Bearer realm="agent_service"'}


class Forbidden(AgentServiceError):
    """The caller is known but may not do this: act for another user or organisation, or use a door
    its permissions do not open. (A resource it may not see is not found instead: 404.)"""

    status_code = 403
    error = "forbidden"


class IdentityProviderUnavailable(AgentServiceError):
    """An access token could not be checked: the identity provider's keys cannot be read."""

    status_code = 503
    error = "identity_provider_unavailable"
    headers: ClassVar[dict[str, str] | None] = {"Retry-After": "5"}


class ProfileNotFound(AgentServiceError):
    status_code = 404
    error = "profile_not_found"


class SessionNotFound(AgentServiceError):
    status_code = 404
    error = "session_not_found"


class RunInProgress(AgentServiceError):
    status_code = 409
    error = "run_in_progress"


class NotAwaitingUser(AgentServiceError):
    status_code = 409
    error = "not_awaiting_user"


class QuestionMismatch(AgentServiceError):
    status_code = 409
    error = "question_mismatch"


class QuestionPending(AgentServiceError):
    status_code = 409
    error = "question_pending"


class IdempotencyKeyConflict(AgentServiceError):
    status_code = 409
    error = "idempotency_key_conflict"


class NothingToCancel(AgentServiceError):
    status_code = 409
    error = "nothing_to_cancel"


class MemoryNotFound(AgentServiceError):
    status_code = 404
    error = "memory_not_found"


class MemoryOff(AgentServiceError):
    status_code = 503
    error = "memory_off"


class QuestionExpired(AgentServiceError):
    status_code = 410
    error = "question_expired"


class MessageTooLarge(AgentServiceError):
    status_code = 413
    error = "message_too_large"


class InvalidRequest(AgentServiceError):
    status_code = 422
    error = "invalid_request"


class NotReady(AgentServiceError):
    status_code = 503
    error = "not_ready"


class Overloaded(AgentServiceError):
    """Every place for a run is taken and the queue for them is full: retry after ``Retry-After``."""

    status_code = 503
    error = "overloaded"

    def __init__(self, detail: Any, retry_after_s: int) -> None:
        super().__init__(detail)
        self.headers = {"Retry-After": str(retry_after_s)}


# SSE ERROR codes of a run and whether a client may retry the same request.
RUN_ERROR_RETRYABLE: dict[ErrorCode, bool] = {
    ErrorCode.LLM_UNAVAILABLE: True,
    ErrorCode.LLM_ERROR: False,
    ErrorCode.MAX_STEPS_EXCEEDED: False,
    ErrorCode.TOKEN_LIMIT_EXCEEDED: False,
    ErrorCode.TOOL_ERROR: False,
    ErrorCode.CANCELLED: False,
    ErrorCode.INTERRUPTED: True,
    ErrorCode.QUESTION_EXPIRED: False,
    ErrorCode.RATE_LIMITED: True,
    ErrorCode.STORAGE_UNAVAILABLE: True,
    ErrorCode.INTERNAL: False,
}


def _render(status_code: int, error: str, detail: Any, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        ErrorBody(error=error, detail=detail).model_dump(mode="json"), status_code=status_code, headers=headers,
    )


def install_error_handlers(app: FastAPI) -> None:
    async def service_error(_: Request, exc: AgentServiceError) -> JSONResponse:
        return _render(exc.status_code, exc.error, exc.detail, exc.headers)

    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        if over_content_cap(exc.errors()):
            return _render(413, MessageTooLarge.error, f"texts are limited to {MAX_CONTENT_CHARS} characters")
        # Locations and messages only: echoing the rejected input could copy message bodies around.
        detail = [{"loc": list(err.get("loc", ())), "msg": err.get("msg", "")} for err in exc.errors()]
        return _render(422, InvalidRequest.error, detail)

    app.add_exception_handler(AgentServiceError, service_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]
    # Unknown paths, wrong methods, unreadable bodies: ErrorBody as well.
    app.add_exception_handler(StarletteHTTPException, http_error)  # type: ignore[arg-type]
    # The database away (a restart): 503 and Retry-After, not a 500.
    install_storage_errors(app)
