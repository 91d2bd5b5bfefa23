"""A streamed response's body messages straight to the server, past the ``send`` wrappers that only
act on the start message: ``DirectBodyMiddleware`` and ``body_send``.

Every middleware of the services (request id, body size limit, HTTP metrics, worker header) and
Starlette's exception middleware wrap ``send`` and look at ``http.response.start`` only; each body
message still goes through every wrapper, one coroutine frame each. An SSE stream sends one body
message per event, so that is paid per event. ``DirectBodyMiddleware``, added outermost, records the
``send`` it was given in the scope; a streaming response sends its start message through the chain
as usual and its body messages with the function ``body_send`` returns.

The shortcut is taken only while every middleware added to the application is one of
``START_ONLY``: one that would need to see body messages (compression, a body rewriter) turns it
off for the whole application, and ``body_send`` then returns the ``send`` it was given.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from shared.body_limit import BodySizeLimitMiddleware
from shared.http_metrics import HttpMetricsMiddleware
from shared.logging import RequestIdMiddleware
from shared.tracing.asgi import TracingMiddleware
from shared.workers import WorkerHeaderMiddleware

__all__ = ["START_ONLY", "DirectBodyMiddleware", "body_send"]

_SCOPE_KEY = "taskforce.direct_body_send"

# Middlewares whose ``send`` wrapper acts on ``http.response.start`` alone (read each one before
# adding it here): body messages may skip them.
# ``TracingMiddleware`` counts the body messages by replacing the recorded send with a counter of its
# own (only when tracing is on): they still skip every wrapper.
START_ONLY: frozenset[type] = frozenset({
    BodySizeLimitMiddleware, HttpMetricsMiddleware, RequestIdMiddleware, TracingMiddleware, WorkerHeaderMiddleware,
})


def _all_start_only(app: object) -> bool:
    return all(
        getattr(entry, "cls", None) in START_ONLY or getattr(entry, "cls", None) is DirectBodyMiddleware
        for entry in getattr(app, "user_middleware", [None])
    )


class DirectBodyMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._enabled: bool | None = None  # decided on the first request, once the stack is built

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if self._enabled is None:
                self._enabled = _all_start_only(scope.get("app")) if "app" in scope else False
            if self._enabled:
                scope[_SCOPE_KEY] = send
        await self.app(scope, receive, send)


def body_send(scope: Scope, send: Send) -> Send:
    """The function to send this response's body messages with, once its start message went
    through ``send``: the outermost middleware's ``send`` when the shortcut is on, else ``send``."""
    return scope.get(_SCOPE_KEY, send)
