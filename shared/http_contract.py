"""Answers of both services that a route's own code does not make, and how their OpenAPI
documents say them.

Every error answer of both services is JSON ``ErrorBody`` (``{"error", "detail"}``), also on the SSE
routes, whose success is ``text/event-stream``: ``errors`` documents them as such, whatever the
route's response class, and ``install_openapi`` makes sure the document defines ``ErrorBody``.
``BODY_ERRORS`` are the answers any route that reads a body may give before its code runs: a body
that is not UTF-8 (400), larger than the cap (413), or not the expected JSON (422). A 405 names
every method the path has (``Allow``), although FastAPI keeps each method in a route of its own;
``http_error`` renders Starlette's own errors (unknown path, wrong method, unreadable body) so.
"""

from __future__ import annotations

import logging
from typing import Any

import asyncpg
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.routing import Match

from shared.protocol import ErrorBody, EventType
from shared.sse import SSE_MEDIA_TYPE
from shared.transactions import is_unavailable

log = logging.getLogger(__name__)

_ERROR_SCHEMA_REF = {"$ref": "#/components/schemas/ErrorBody"}

# Prometheus' text exposition format, not JSON.
METRICS_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {"description": "Prometheus metrics (text exposition format)",
          "content": {"text/plain": {"schema": {"type": "string"}}}},
}


# One event of the Agent Service's streams (before OpenAPI 3.2, the schema of an event stream is
# that of each event): its type, its seq, and the EventEnvelope as JSON.
SSE_EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "event": {"type": "string", "enum": [t.value for t in EventType]},
        "id": {"type": "string", "pattern": "^[0-9]+$", "description": "the event's seq (Last-Event-ID)"},
        "data": {"type": "string", "contentMediaType": "application/json", "description": "the EventEnvelope"},
        "retry": {"type": "integer", "minimum": 0},
    },
    "required": ["event", "id", "data"],
}


def event_stream(description: str) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entry of a 200 that is an event stream."""
    return {200: {"description": description, "content": {SSE_MEDIA_TYPE: {"schema": SSE_EVENT_SCHEMA}}}}


def errors(described: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for these statuses, each a JSON ``ErrorBody`` with its description."""
    return {
        status: {"description": description, "content": {"application/json": {"schema": _ERROR_SCHEMA_REF}}}
        for status, description in described.items()
    }


BODY_ERRORS = {
    400: "the body could not be read (not UTF-8)",
    413: "the body, or a text in it, is larger than allowed",
    422: "the body or a parameter is not what the operation takes",
}


def install_openapi(app: FastAPI) -> None:
    """Define ``ErrorBody`` in the document, which ``errors`` refers to."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = build()
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            schemas.setdefault("ErrorBody", ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}"))
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> str:
    """The ``Allow`` of a 405: every method some route takes on this path (Starlette's own names
    only the methods of the first route whose path matched)."""
    routes = request.app.router.routes
    return ", ".join(
        method for method in _METHODS
        if any(route.matches({**request.scope, "method": method})[0] == Match.FULL for route in routes)
    )


HTTP_ERROR_NAMES = {
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


def http_error(request: Request, exc: HTTPException) -> JSONResponse:
    """Starlette's and FastAPI's own HTTP errors as ``ErrorBody``, a 405 with its full ``Allow``."""
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = allowed_methods(request)
    body = ErrorBody(error=HTTP_ERROR_NAMES.get(exc.status_code, "http_error"), detail=exc.detail)
    return JSONResponse(body.model_dump(mode="json"), status_code=exc.status_code, headers=headers or None)


# Seconds a client is told to wait before trying again while the database is away.
STORAGE_RETRY_AFTER_S = 2


def storage_error(request: Request, exc: Exception) -> JSONResponse:
    """A database error that reached a route: 503 with ``Retry-After`` while the database is away (a
    restart, a failover; nothing was done, the same request may be sent again), else the 500 it is."""
    if is_unavailable(exc):
        log.warning("database unavailable; request answered 503", extra={"error_type": type(exc).__name__})
        body = ErrorBody(error="storage_unavailable", detail="the database is unavailable; try again shortly")
        return JSONResponse(body.model_dump(mode="json"), status_code=503,
                            headers={"Retry-After": str(STORAGE_RETRY_AFTER_S)})
    log.error("request failed", exc_info=exc)
    body = ErrorBody(error="internal_error", detail="internal error")
    return JSONResponse(body.model_dump(mode="json"), status_code=500)


def install_storage_errors(app: FastAPI) -> None:
    """``storage_error`` for the database's errors (SQLAlchemy's and the drivers' connection errors, and
    a pool that had no connection free within its timeout: overload, answered 503, never a 500)."""
    for kind in (DBAPIError, DisconnectionError, PoolTimeout, ConnectionError,
                 asyncpg.exceptions.PostgresConnectionError, asyncpg.exceptions.CannotConnectNowError):
        app.add_exception_handler(kind, storage_error)  # type: ignore[arg-type]
