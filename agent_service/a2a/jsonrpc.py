"""The JSON-RPC 2.0 binding of A2A 1.0 (spec 9): ``POST /a2a/jsonrpc``.

One route; the method names the operation. Answers are JSON-RPC responses (HTTP 200, errors
included, except a refused authentication: 401), streams are SSE whose events each hold one
JSON-RPC response with a ``StreamResponse``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from agent_service.a2a import transport
from agent_service.a2a.card import JSONRPC_PATH, REST_PATH
from agent_service.a2a.errors import (
    A2AError,
    IdentityProviderDown,
    InternalError,
    InvalidRequest,
    MethodNotFound,
    ParseError,
    PermissionDenied,
    Unauthenticated,
    no_extended_card,
    no_push_notifications,
)
from agent_service.a2a.schemas import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SendMessageRequest,
    SubscribeToTaskRequest,
)
from agent_service.a2a.transport import A2AParts
from agent_service.access.caller import Caller
from agent_service.events.streaming import EventStreamResponse

log = logging.getLogger(__name__)
router = APIRouter(include_in_schema=False)

_PUSH_METHODS = frozenset({
    "CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig", "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
})
STREAM_METHODS = frozenset({"SendStreamingMessage", "SubscribeToTask"})
# Every method this binding answers (each has its caller: the tenancy test holds them to it).
METHODS = frozenset({
    "SendMessage", "GetTask", "ListTasks", "CancelTask", *STREAM_METHODS, *_PUSH_METHODS, "GetExtendedAgentCard",
})
RequestId = str | int | None


def _answer(request_id: RequestId, *, result: Any = None, error: A2AError | None = None) -> JSONResponse:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
    if error is not None:
        body["error"] = error.jsonrpc()
    else:
        body["result"] = result
    # Refused before the method runs (no credential, or one not allowed here): the HTTP status says so
    # too, as for the other bindings and every HTTP client's auth handling.
    status = error.http_status if isinstance(error, Unauthenticated | PermissionDenied | IdentityProviderDown) else 200
    return JSONResponse(body, status_code=status)


def too_large(path: str, max_bytes: int) -> tuple[bytes, bytes] | None:
    """The refusal of an oversized body (``shared.body_limit``) on the A2A bindings: a JSON-RPC error
    (Invalid Request, id null: the body was never read) or an AIP-193 body, still with HTTP 413."""
    error = InvalidRequest(f"request bodies are limited to {max_bytes} bytes")
    if path.rstrip("/") == JSONRPC_PATH:
        return b"application/json", orjson.dumps({"jsonrpc": "2.0", "id": None, "error": error.jsonrpc()})
    if path.startswith(REST_PATH + "/"):
        body = error.rest_body()
        body["error"].update(code=413, status="INVALID_ARGUMENT")
        return b"application/json", orjson.dumps(body)
    return None


def _envelope(body: bytes) -> tuple[RequestId, str, Any]:
    """The id, method and params of a JSON-RPC request, or the error that it is not one."""
    try:
        call = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ParseError("the body is not valid JSON") from None
    if not isinstance(call, dict):
        raise InvalidRequest("a JSON-RPC request is an object (batches are not supported)")
    request_id = call.get("id")
    if request_id is not None and (not isinstance(request_id, str | int) or isinstance(request_id, bool)):
        # An id is a string, a number or null (JSON-RPC 2.0 4); an object, array or boolean makes
        # the request invalid, answered with id null since it has no usable one.
        raise InvalidRequest("a JSON-RPC request's id is a string, a number or null")
    if call.get("jsonrpc") != "2.0" or not isinstance(call.get("method"), str):
        raise InvalidRequest('a JSON-RPC 2.0 request has "jsonrpc": "2.0" and a method name')
    return request_id, call["method"], call.get("params", {})


async def _unary(a2a: A2AParts, method: str, params: Any, caller: Caller) -> Any:
    service = a2a.service
    if method == "SendMessage":
        return await service.send(transport.validated(SendMessageRequest, params), caller)
    if method == "GetTask":
        return await service.get(transport.validated(GetTaskRequest, params), caller)
    if method == "ListTasks":
        return await service.list(transport.validated(ListTasksRequest, params), caller)
    if method == "CancelTask":
        return await service.cancel(transport.validated(CancelTaskRequest, params), caller)
    if method in _PUSH_METHODS:
        raise no_push_notifications()
    if method == "GetExtendedAgentCard":
        raise no_extended_card()
    raise MethodNotFound(f"no method {method!r}")


async def _stream(
    request: Request, a2a: A2AParts, request_id: RequestId, method: str, params: Any, caller: Caller,
) -> Response:
    def frame(response: dict[str, Any], seq: int | None) -> bytes:
        return transport.sse_event({"jsonrpc": "2.0", "id": request_id, "result": response}, seq)

    serve: Callable[..., Awaitable[None]]
    if method == "SendStreamingMessage":
        serve = await a2a.streams.send(transport.validated(SendMessageRequest, params), frame, caller)
    else:
        serve = await a2a.streams.subscribe(
            transport.validated(SubscribeToTaskRequest, params), frame, transport.last_event_id(request), caller,
        )
    return EventStreamResponse(serve, headers={})


@router.post(JSONRPC_PATH)
@router.post(JSONRPC_PATH + "/")
async def jsonrpc(request: Request) -> Response:
    request_id: RequestId = None
    a2a = transport.parts(request)
    try:
        caller = await transport.authenticate(request)
        transport.check_content_type(request)
        request_id, method, params = _envelope(await request.body())
        transport.check_version(request)
        if method in STREAM_METHODS:
            return await _stream(request, a2a, request_id, method, params, caller)
        return _answer(request_id, result=await _unary(a2a, method, params, caller))
    except A2AError as exc:
        return _answer(request_id, error=exc)
    except Exception:
        log.exception("A2A JSON-RPC request failed")
        return _answer(request_id, error=InternalError("internal error"))
