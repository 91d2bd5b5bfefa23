"""The Agent Card, and the HTTP+JSON binding of A2A 1.0 (spec 11) under ``/a2a/v1``.

Errors are AIP-193 bodies with the binding's status codes (spec 5.4); streams are SSE whose
events each hold one ``StreamResponse``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from agent_service.a2a.card import CARD_MAX_AGE_S, REST_PATH, build_card, card_etag
from agent_service.a2a.errors import (
    A2AError,
    InternalError,
    InvalidParams,
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
from agent_service.a2a.transport import (
    authenticate,
    check_content_type,
    check_version,
    last_event_id,
    parts,
    sse_event,
    validated,
)
from agent_service.access.caller import Caller
from agent_service.events.streaming import EventStreamResponse

log = logging.getLogger(__name__)
router = APIRouter(include_in_schema=False)
# The card is built from the profiles, which are read once at start-up.
_STARTED = format_datetime(datetime.now(UTC), usegmt=True)

Operation = Callable[[Request, Caller], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]


@router.get("/.well-known/agent-card.json")
async def agent_card(request: Request) -> Response:
    """Public, as discovery needs: no key, cacheable."""
    agent = request.app.state.agent
    card = build_card(agent.settings, agent.profiles, str(request.base_url))
    etag = card_etag(card)
    headers = {"Cache-Control": f"public, max-age={CARD_MAX_AGE_S}", "ETag": etag, "Last-Modified": _STARTED}
    if request.headers.get("If-None-Match") == etag:
        return Response(status_code=304, headers=headers)
    return JSONResponse(card, headers=headers)


def _rest(operation: Operation) -> Endpoint:
    """Authentication (the operation gets its caller), version, and every error as AIP-193."""

    async def handle(request: Request) -> Response:
        try:
            caller = await authenticate(request)
            check_version(request)
            return await operation(request, caller)
        except A2AError as exc:
            return exc.rest_response()
        except Exception:
            log.exception("A2A HTTP+JSON request failed")
            return InternalError("internal error").rest_response()

    handle.__name__ = operation.__name__
    return handle


async def _body(request: Request, model: type[BaseModel], **extra: Any) -> Any:
    check_content_type(request)
    try:
        body = orjson.loads(await request.body() or b"{}")
    except orjson.JSONDecodeError:
        raise InvalidParams("the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise InvalidParams("the body is a JSON object")
    return validated(model, body | extra)


def _frame(response: dict[str, Any], seq: int | None) -> bytes:
    return sse_event(response, seq)


@_rest
async def send_message(request: Request, caller: Caller) -> Response:
    return JSONResponse(await parts(request).service.send(await _body(request, SendMessageRequest), caller))


@_rest
async def stream_message(request: Request, caller: Caller) -> Response:
    serve = await parts(request).streams.send(await _body(request, SendMessageRequest), _frame, caller)
    return EventStreamResponse(serve, headers={})


@_rest
async def get_task(request: Request, caller: Caller) -> Response:
    query = dict(request.query_params) | {"id": request.path_params["id"]}
    return JSONResponse(await parts(request).service.get(validated(GetTaskRequest, query), caller))


@_rest
async def list_tasks(request: Request, caller: Caller) -> Response:
    query = {key: value for key, value in request.query_params.items() if key != "A2A-Version"}
    return JSONResponse(await parts(request).service.list(validated(ListTasksRequest, query), caller))


@_rest
async def cancel_task(request: Request, caller: Caller) -> Response:
    cancel = await _body(request, CancelTaskRequest, id=request.path_params["id"])
    return JSONResponse(await parts(request).service.cancel(cancel, caller))


@_rest
async def subscribe(request: Request, caller: Caller) -> Response:
    subscription = validated(SubscribeToTaskRequest, {"id": request.path_params["id"]})
    serve = await parts(request).streams.subscribe(subscription, _frame, last_event_id(request), caller)
    return EventStreamResponse(serve, headers={})


@_rest
async def push_configs(request: Request, caller: Caller) -> Response:
    raise no_push_notifications()


@_rest
async def extended_card(request: Request, caller: Caller) -> Response:
    raise no_extended_card()


for path, methods, endpoint in (
    ("/message:send", ["POST"], send_message),
    ("/message:stream", ["POST"], stream_message),
    ("/tasks", ["GET"], list_tasks),
    ("/tasks/{id}:cancel", ["POST"], cancel_task),
    ("/tasks/{id}:subscribe", ["POST"], subscribe),
    ("/tasks/{id}", ["GET"], get_task),
    ("/tasks/{id}/pushNotificationConfigs", ["GET", "POST"], push_configs),
    ("/tasks/{id}/pushNotificationConfigs/{config_id}", ["GET", "DELETE"], push_configs),
    ("/extendedAgentCard", ["GET"], extended_card),
):
    router.add_api_route(REST_PATH + path, endpoint, methods=methods, include_in_schema=False)
