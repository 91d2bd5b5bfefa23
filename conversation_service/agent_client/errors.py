"""Every error the ``AgentServiceClient`` raises, rooted at one base class.

::

    AgentServiceError                      retryable, user_message
    ├── AgentTransportError                the request or the stream failed below HTTP
    │   ├── AgentConnectError              no connection could be made
    │   └── AgentTimeoutError              connect/read/pool, first-event or whole-stream timeout
    ├── AgentHTTPError                     a non-2xx answer; status_code, error, detail
    │   ├── AgentBadRequestError           400, 422
    │   ├── AgentAuthError                 401, 403
    │   ├── AgentNotFoundError             404
    │   ├── AgentRequestTimeoutError       408 (never retried: the user is told)
    │   ├── AgentConflictError             409 (the session is already running)
    │   ├── AgentGoneError                 410
    │   ├── AgentPayloadTooLargeError      413
    │   ├── AgentUnavailableError          503, 429 (retried with backoff)
    │   └── AgentServerError               500 and other 5xx (retried once)
    ├── AgentProtocolError                 an invalid or oversized event
    └── AgentStreamError                   a stream broke and could not be resumed

``retryable`` says whether repeating the same call (same idempotency key) may succeed;
``user_message`` is a short sentence a chat can show as is. Neither, nor ``str()`` of any error,
ever contains the API key or a message body: ``detail`` is the Agent Service's own error detail.

httpx exceptions are translated in exactly one place, :func:`translating_transport_errors`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson

_MAX_DETAIL_IN_MESSAGE = 300


class AgentServiceError(Exception):
    """Root of the client's errors."""

    retryable: bool = False
    user_message: str = "The agent could not handle this request."

    def __init__(self, message: str, *, retryable: bool | None = None, user_message: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if retryable is not None:
            self.retryable = retryable
        if user_message is not None:
            self.user_message = user_message


class AgentTransportError(AgentServiceError):
    """The connection failed or broke; with an idempotency key, repeating the call is safe."""

    retryable = True
    user_message = "The agent service could not be reached. Please try again in a moment."


class AgentConnectError(AgentTransportError):
    pass


class AgentTimeoutError(AgentTransportError):
    # A request that already waited its full timeout is not repeated: the user is told instead.
    retryable = False
    user_message = "The agent took too long to answer. Please try again."


class AgentHTTPError(AgentServiceError):
    """A non-2xx answer; ``error`` and ``detail`` come from its ``{"error", "detail"}`` body."""

    def __init__(
        self, status_code: int, error: str | None = None, detail: Any = None, *, request_id: str | None = None
    ) -> None:
        self.status_code = status_code
        self.error = error
        self.detail = detail
        self.request_id = request_id
        text = f"Agent Service answered {status_code}"
        if error:
            text += f" {error}"
        if detail is not None:
            shown = detail if isinstance(detail, str) else orjson.dumps(detail, default=str).decode()
            if len(shown) > _MAX_DETAIL_IN_MESSAGE:
                shown = shown[:_MAX_DETAIL_IN_MESSAGE] + "…"
            text += f": {shown}"
        super().__init__(text)


class AgentBadRequestError(AgentHTTPError):
    user_message = "The agent could not process this message."


class AgentAuthError(AgentHTTPError):
    user_message = "The agent is not available right now (access was refused)."


class AgentNotFoundError(AgentHTTPError):
    user_message = "The agent session no longer exists."


class AgentRequestTimeoutError(AgentHTTPError):
    user_message = "The agent took too long to answer. Please try again."


class AgentConflictError(AgentHTTPError):
    user_message = "The agent is still working on the previous message. Please wait for it to finish."


class AgentGoneError(AgentHTTPError):
    user_message = "This agent session has ended."


class AgentPayloadTooLargeError(AgentHTTPError):
    user_message = "The message is too long for the agent."


class AgentUnavailableError(AgentHTTPError):
    retryable = True
    user_message = "The agent is busy or temporarily unavailable. Please try again in a moment."


class AgentServerError(AgentHTTPError):
    retryable = True
    user_message = "The agent ran into an internal problem. Please try again later."


class AgentProtocolError(AgentServiceError):
    """The Agent Service sent something that breaks the contract; repeating would not help."""

    user_message = "The agent sent an invalid response."


class AgentStreamError(AgentServiceError):
    user_message = "The connection to the agent was lost before it finished."


_STATUS_ERRORS: dict[int, type[AgentHTTPError]] = {
    400: AgentBadRequestError,
    401: AgentAuthError,
    403: AgentAuthError,
    404: AgentNotFoundError,
    408: AgentRequestTimeoutError,
    409: AgentConflictError,
    410: AgentGoneError,
    413: AgentPayloadTooLargeError,
    422: AgentBadRequestError,
    429: AgentUnavailableError,
    503: AgentUnavailableError,
}


def error_for_status(status_code: int, body: bytes, *, request_id: str | None = None) -> AgentHTTPError:
    """The error for a non-2xx answer; ``body`` is untrusted and already size-capped."""
    error: str | None = None
    detail: Any = None
    try:
        parsed = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        raw_error = parsed.get("error")
        error = raw_error[:128] if isinstance(raw_error, str) else None
        detail = parsed.get("detail")
    return error_class_for_status(status_code)(status_code, error, detail, request_id=request_id)


def error_class_for_status(status_code: int) -> type[AgentHTTPError]:
    """The error class of a non-2xx status (the A2A agents' errors map onto it too)."""
    return _STATUS_ERRORS.get(status_code) or (AgentServerError if status_code >= 500 else AgentHTTPError)


@contextmanager
def translating_transport_errors() -> Iterator[None]:
    """The one place where httpx's transport exceptions become the client's."""
    try:
        yield
    except (httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        # Nothing reached the service yet, so another try cannot duplicate work.
        raise AgentTimeoutError(f"{type(exc).__name__} while connecting to the Agent Service", retryable=True) from exc
    except httpx.TimeoutException as exc:
        raise AgentTimeoutError(f"{type(exc).__name__}: the Agent Service stopped answering") from exc
    except httpx.ConnectError as exc:
        raise AgentConnectError(f"cannot connect to the Agent Service: {type(exc).__name__}") from exc
    except httpx.TransportError as exc:
        # Read/write errors and a peer closing mid-body: the connection broke under us.
        raise AgentTransportError(f"connection to the Agent Service broke: {type(exc).__name__}") from exc
