"""Request size caps for both services: 413 ``payload_too_large`` before anything parses the body.

A declared ``Content-Length`` over the cap is refused at once; a chunked body is counted as it is
read and refused the moment it passes the cap (unless the app already started its answer).
``over_content_cap`` tells the validation handlers that a text passed the contract's outer cap,
which is answered 413 like a text over the configured (smaller) limit, not 422."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.protocol import MAX_CONTENT_CHARS


def over_content_cap(errors: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a validation failed because a text (a message, an answer) is longer than
    ``MAX_CONTENT_CHARS``: a size, so that a 2 MB message answers as a 40 kB one does."""
    return any(
        error.get("type") == "string_too_long" and (error.get("ctx") or {}).get("max_length") == MAX_CONTENT_CHARS
        for error in errors
    )


class _TooLarge(BaseException):
    """Raised from ``receive`` inside the app: a BaseException, like a cancellation, so that no handler
    of the app that catches ``Exception`` (the A2A bindings answer every error in their own format)
    turns the refusal into an error answer of its own; this middleware answers it."""


# A door with an error format of its own (A2A's JSON-RPC and HTTP+JSON bindings) renders the refusal
# itself: given the request's path and the cap, its (content type, body); None: the plain ErrorBody.
TooLargeRenderer = Callable[[str, int], tuple[bytes, bytes] | None]


def _plain(_path: str, max_bytes: int) -> tuple[bytes, bytes]:
    return b"application/json", orjson.dumps(
        {"error": "payload_too_large", "detail": f"request bodies are limited to {max_bytes} bytes"}
    )


class BodySizeLimitMiddleware:
    # Its send wrapper acts on http.response.start only: streamed bodies may skip it (shared.fastpath.direct_body).
    START_ONLY = True

    def __init__(self, app: ASGIApp, max_bytes: int, render: TooLargeRenderer | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.render = render

    async def _reject(self, scope: Scope, send: Send) -> None:
        rendered = self.render(scope.get("path", ""), self.max_bytes) if self.render is not None else None
        content_type, body = rendered or _plain(scope.get("path", ""), self.max_bytes)
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    def _declared_too_large(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    return int(value) > self.max_bytes
                except ValueError:
                    return True
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._declared_too_large(scope):
            await self._reject(scope, send)
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _TooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._reject(scope, send)
