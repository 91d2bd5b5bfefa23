from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header

from agent_service.auth import ApiKey
from agent_service.deps import RunServiceDep, StreamerDep
from agent_service.runs.streaming import EventStreamResponse
from shared.protocol import ErrorBody, ExecuteRequest
from shared.sse import SSE_MEDIA_TYPE

router = APIRouter(prefix="/api/v1/agent", tags=["runs"])

_ERRORS = {
    401: {"model": ErrorBody, "description": "missing or invalid X-API-Key"},
    404: {"model": ErrorBody, "description": "unknown profile or session"},
    409: {"model": ErrorBody, "description": "a run is executing, or the answer does not fit the session"},
    410: {"model": ErrorBody, "description": "the question expired"},
    413: {"model": ErrorBody, "description": "message larger than the configured limit"},
    422: {"model": ErrorBody, "description": "malformed request"},
}


@router.post(
    "/execute",
    response_class=EventStreamResponse,
    responses={200: {"content": {SSE_MEDIA_TYPE: {}}, "description": "the run's events as SSE"}, **_ERRORS},
)
async def execute(
    body: ExecuteRequest,
    _: ApiKey,
    service: RunServiceDep,
    streamer: StreamerDep,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=128)] = None,
) -> EventStreamResponse:
    """Start a run (or resume a paused one with ``answer``) and stream its events.

    The run does not depend on this connection: a client that drops reconnects to
    ``/sessions/{id}/events`` with ``Last-Event-ID``, or retries with the same ``Idempotency-Key``.
    """
    handle = await service.execute(body, idempotency_key)
    return EventStreamResponse(
        lambda write, disconnected: streamer.serve(
            write, handle.session_id, handle.first_seq - 1, until_run=handle.run_id, live=handle.live,
            disconnected=disconnected,
        ),
        headers={"X-Session-ID": handle.session_id, "X-Run-ID": handle.run_id},
    )
