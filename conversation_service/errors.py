"""The ConversationService error vocabulary.

One base error carries its HTTP status, its name on the wire and the WebSocket close code it maps
to; one handler renders ``{"error": <name>, "detail": ...}``. Another user's conversation is
``NotFound`` (never 403), so the API does not reveal that it exists.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.body_limit import over_content_cap
from shared.http_contract import http_error, install_storage_errors
from shared.protocol import MAX_CONTENT_CHARS

# WebSocket close codes (RFC 6455 and the IANA registry).
WS_POLICY_VIOLATION = 1008
WS_MESSAGE_TOO_BIG = 1009
WS_INTERNAL_ERROR = 1011
WS_TRY_AGAIN_LATER = 1013


# What a 503 tells the client to wait before it tries again.
UNAVAILABLE_RETRY_AFTER_S = 5


class ServiceError(Exception):
    status_code = 500
    error = "internal_error"
    ws_close_code = WS_INTERNAL_ERROR
    headers: dict[str, str] | None = None

    def __init__(self, detail: Any = None) -> None:
        super().__init__(detail)
        self.detail = detail


class Unauthorized(ServiceError):
    status_code = 401
    error = "unauthorized"
    ws_close_code = WS_POLICY_VIOLATION

    @property
    def challenge(self) -> str:
        """``WWW-Authenticate`` (RFC 6750 3): what the client should send."""
        return 'Bearer realm="conversation_service"'


class Forbidden(ServiceError):
    status_code = 403
    error = "forbidden"
    ws_close_code = WS_POLICY_VIOLATION


class NotFound(ServiceError):
    status_code = 404
    error = "not_found"
    ws_close_code = WS_POLICY_VIOLATION


class Conflict(ServiceError):
    status_code = 409
    error = "conflict"
    ws_close_code = WS_TRY_AGAIN_LATER


class Gone(ServiceError):
    status_code = 410
    error = "gone"
    ws_close_code = WS_POLICY_VIOLATION


class PayloadTooLarge(ServiceError):
    status_code = 413
    error = "payload_too_large"
    ws_close_code = WS_MESSAGE_TOO_BIG


class InvalidInput(ServiceError):
    status_code = 422
    error = "validation_error"
    ws_close_code = WS_POLICY_VIOLATION


class Unavailable(ServiceError):
    status_code = 503
    error = "unavailable"
    ws_close_code = WS_TRY_AGAIN_LATER


class Overloaded(ServiceError):
    """Every place for a reply is taken and the queue for them is full: retry after ``Retry-After``."""

    status_code = 503
    error = "overloaded"
    ws_close_code = WS_TRY_AGAIN_LATER

    def __init__(self, detail: Any, retry_after_s: int) -> None:
        super().__init__(detail)
        self.headers = {"Retry-After": str(retry_after_s)}


def error_body(error: str, detail: Any = None) -> dict[str, Any]:
    return {"error": error, "detail": detail}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service_error(_: Request, exc: ServiceError) -> JSONResponse:
        headers = dict(exc.headers or {})
        if isinstance(exc, Unauthorized):
            headers["WWW-Authenticate"] = exc.challenge
        elif isinstance(exc, Unavailable):
            headers.setdefault("Retry-After", str(UNAVAILABLE_RETRY_AFTER_S))
        return JSONResponse(error_body(exc.error, exc.detail), status_code=exc.status_code, headers=headers or None)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        if over_content_cap(exc.errors()):
            detail = f"texts are limited to {MAX_CONTENT_CHARS} characters"
            return JSONResponse(error_body(PayloadTooLarge.error, detail), status_code=413)
        # Echo locations and messages, never the submitted values (they may be message bodies).
        detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")} for e in exc.errors()]
        return JSONResponse(error_body("validation_error", detail), status_code=422)

    # Unknown paths, wrong methods (with every allowed one), unreadable bodies.
    app.add_exception_handler(StarletteHTTPException, http_error)  # type: ignore[arg-type]
    # The database away (a restart): 503 and Retry-After, not a 500.
    install_storage_errors(app)
