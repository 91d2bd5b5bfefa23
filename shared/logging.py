"""Structured JSON logs with correlation ids, kept in context variables: set once at the edge (HTTP
middleware, run task), they go on every line written in that context. Message bodies and secrets
are never logged; ids, sizes and outcomes are."""

from __future__ import annotations

import logging
import sys
import uuid
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

request_id_var: ContextVar[str | None] = ContextVar("request_id", default=None)
session_id_var: ContextVar[str | None] = ContextVar("session_id", default=None)
conversation_id_var: ContextVar[str | None] = ContextVar("conversation_id", default=None)

REQUEST_ID_HEADER = "X-Request-ID"
_MAX_REQUEST_ID = 128

# color_message is uvicorn's copy of msg with terminal colour codes: noise in a JSON line.
_RESERVED = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "color_message"}
# Orchestrators and Prometheus call these every few seconds; only a failed one is worth a line.
PROBE_PATHS = frozenset({"/health", "/ready", "/metrics"})


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for var in (request_id_var, session_id_var, conversation_id_var):
            if (value := var.get()) is not None:
                out[var.name] = value
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def _not_a_successful_probe(record: logging.LogRecord) -> bool:
    """httpx logs each request it makes (args: method, url, http version, status, reason), which
    includes the chat service's poll of the Agent Service's /health."""
    if record.name != "httpx" or not isinstance(record.args, tuple) or len(record.args) != 5:
        return True
    url, status = record.args[1], record.args[3]
    return not (isinstance(status, int) and status < 400 and getattr(url, "path", None) in PROBE_PATHS)


def configure_logging(service: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    handler.addFilter(_not_a_successful_probe)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # uvicorn's access log would print full paths and query strings; ours logs ids instead.
    logging.getLogger("uvicorn.access").disabled = True
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True


def _clean_request_id(raw: str | None) -> str:
    if raw and len(raw) <= _MAX_REQUEST_ID and raw.isprintable() and " " not in raw:
        return raw
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """Takes ``X-Request-ID`` from the request (or makes one), binds it for logs, echoes it back.

    Pure ASGI rather than ``BaseHTTPMiddleware`` so streaming responses are not buffered and
    WebSockets pass through.
    """
    # Its send wrapper acts on http.response.start only: streamed bodies may skip it (shared.fastpath.direct_body).
    START_ONLY = True

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers", ())
        raw = next((value.decode("latin-1") for name, value in headers if name == b"x-request-id"), None)
        request_id = _clean_request_id(raw)
        token = request_id_var.set(request_id)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                headers.append((b"x-request-id", request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            # A WebSocket's messages carry no response headers: its frames, one per token, go to
            # ``send`` directly instead of through one more call each.
            await self.app(scope, receive, send_with_id if scope["type"] == "http" else send)
        finally:
            request_id_var.reset(token)
