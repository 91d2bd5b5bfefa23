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

# WebSocket close codes (RFC 6455 and the IANA registry).
WS_POLICY_VIOLATION = 1008
WS_MESSAGE_TOO_BIG = 1009
WS_INTERNAL_ERROR = 1011
WS_TRY_AGAIN_LATER = 1013


class ServiceError(Exception):
    status_code = 500
    error = "internal_error"
    ws_close_code = WS_INTERNAL_ERROR

    def __init__(self, detail: Any = None) -> None:
        super().__init__(detail)
        self.detail = detail


class Unauthorized(ServiceError):
    status_code = 401
    error = "unauthorized"
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


_HTTP_NAMES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "too_many_requests",
}


def error_body(error: str, detail: Any = None) -> dict[str, Any]:
    return {"error": error, "detail": detail}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service_error(_: Request, exc: ServiceError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
        return JSONResponse(error_body(exc.error, exc.detail), status_code=exc.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        # Echo locations and messages, never the submitted values (they may be message bodies).
        detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")} for e in exc.errors()]
        return JSONResponse(error_body("validation_error", detail), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        name = _HTTP_NAMES.get(exc.status_code, "http_error")
        return JSONResponse(error_body(name, exc.detail), status_code=exc.status_code, headers=exc.headers)
