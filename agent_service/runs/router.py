from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header

from agent_service.access.deps import RunsCaller
from agent_service.events.deps import StreamerDep
from agent_service.events.streaming import EventStreamResponse
from agent_service.runs.service import RunService
from shared.app_state import started
from shared.http_contract import BODY_ERRORS, errors, event_stream
from shared.protocol import ExecuteRequest

router = APIRouter(prefix="/api/v1/agent", tags=["runs"])
RunServiceDep = Annotated[RunService, Depends(started("agent", "run_service"))]

# JSON ErrorBody, although the success is an event stream: the answer is refused before it starts.
_ERRORS = errors({
    **BODY_ERRORS,
    401: "missing or invalid X-API-Key or bearer token",
    403: "user_context names a user or organisation the caller may not act for, or it may not use the runs API",
    404: "unknown profile or session (or another caller's session)",
    409: "a run is executing, or the answer does not fit the session",
    410: "the question expired",
    413: "the body is larger than allowed, or the message or answer longer than the configured limit",
    422: "malformed request: neither a message nor an answer to a session, or a bad field or header",
    503: "at capacity: every place for a run is taken and the queue for them is full; retry after Retry-After",
})


@router.post(
    "/execute",
    response_class=EventStreamResponse,
    responses={**event_stream("the run's events as SSE"), **_ERRORS},
)
async def execute(
    body: ExecuteRequest,
    caller: RunsCaller,
    service: RunServiceDep,
    streamer: StreamerDep,
    # Visible ASCII: what a header carries unchanged (HTTP trims outer spaces). Said in the document too.
    idempotency_key: Annotated[
        str | None, Header(alias="Idempotency-Key", min_length=1, max_length=128, pattern=r"^[!-~]+$")
    ] = None,
) -> EventStreamResponse:
    """Start a run (or resume a paused one with ``answer``) and stream its events.

    The run does not depend on this connection: a client that drops reconnects to
    ``/sessions/{id}/events`` with ``Last-Event-ID``, or retries with the same ``Idempotency-Key``.
    """
    handle = await service.execute(body, idempotency_key, caller)
    return EventStreamResponse(
        lambda write, disconnected: streamer.serve(
            write, handle.session_id, handle.first_seq - 1, until_run=handle.run_id, live=handle.live,
            disconnected=disconnected,
        ),
        headers={"X-Session-ID": handle.session_id, "X-Run-ID": handle.run_id},
    )
