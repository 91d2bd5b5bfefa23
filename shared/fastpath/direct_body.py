"""A streamed response's body messages straight to the server, past the ``send`` wrappers that only
act on the start message: ``DirectBodyMiddleware`` and ``body_send``.

Every middleware of the services (request id, body size limit, HTTP metrics, worker header) and
Starlette's exception middleware wrap ``send`` and look at ``http.response.start`` only; each body
message still goes through every wrapper, one coroutine frame each. An SSE stream sends one body
message per event, so that is paid per event. ``DirectBodyMiddleware``, added outermost, records the
``send`` it was given in the scope; a streaming response sends its start message through the chain
as usual and its body messages with the function ``body_send`` returns.

The shortcut is taken only while every middleware added to the application declares
``START_ONLY = True`` on its class (read its ``send`` wrapper before declaring it): one that would
need to see body messages (compression, a body rewriter, anything from a library) turns it off for
the whole application, and ``body_send`` then returns the ``send`` it was given. The declaration
lives on each middleware, so this module imports none of them.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["DirectBodyMiddleware", "body_send"]

_SCOPE_KEY = "taskforce.direct_body_send"


def _all_start_only(app: object) -> bool:
    return all(
        getattr(getattr(entry, "cls", None), "START_ONLY", False) is True
        for entry in getattr(app, "user_middleware", [None])
    )


class DirectBodyMiddleware:
    START_ONLY = True

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
