from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Query, Response, status

from agent_service.access.deps import RunsCaller
from agent_service.events.deps import StreamerDep
from agent_service.events.streaming import EventStreamResponse
from agent_service.sessions.service import SessionService
from shared.app_state import started
from shared.http_contract import errors, event_stream
from shared.logging import session_id_var
from shared.protocol import MAX_ID_CHARS, SessionStatusResponse

router = APIRouter(prefix="/api/v1/agent/sessions", tags=["sessions"])
SessionServiceDep = Annotated[SessionService, Depends(started("agent", "session_service"))]



async def _bind_session_id(session_id: Annotated[str, Path(min_length=1, max_length=MAX_ID_CHARS)]) -> str:
    # Every log line of this request carries the session it is about.
    session_id_var.set(session_id)
    return session_id


SessionId = Annotated[str, Depends(_bind_session_id)]
# JSON ErrorBody on every route, the event stream's included: it is refused before it starts.
_ERRORS = errors({
    401: "missing or invalid X-API-Key or bearer token",
    403: "the caller may not use the runs API",
    404: "unknown session, or another caller's",
    422: "a session id longer than allowed, or a bad Last-Event-ID or after",
})


@router.get("/{session_id}", response_model=SessionStatusResponse, responses=_ERRORS)
async def session_status(session_id: SessionId, caller: RunsCaller, service: SessionServiceDep) -> SessionStatusResponse:
    return await service.status(session_id, caller)


@router.get(
    "/{session_id}/events",
    response_class=EventStreamResponse,
    responses={**event_stream("the session's events as SSE"), **_ERRORS},
)
async def session_events(
    session_id: SessionId,
    caller: RunsCaller,
    service: SessionServiceDep,
    streamer: StreamerDep,
    # An event's seq; empty is the same as absent. The pattern is in the OpenAPI document too.
    last_event_id: Annotated[str, Header(alias="Last-Event-ID", max_length=20, pattern=r"^[0-9]*$")] = "",
    after: Annotated[int | None, Query(ge=0)] = None,
) -> EventStreamResponse:
    """Every event after ``Last-Event-ID`` (or ``?after=``), then the live ones until the run ends."""
    start = after
    if last_event_id:
        start = max(start or 0, int(last_event_id))
    await service.ensure_session(session_id, caller)
    return EventStreamResponse(
        lambda write, disconnected: streamer.serve(write, session_id, start or 0, disconnected=disconnected),
        headers={},
    )


@router.post(
    "/{session_id}/cancel",
    response_model=SessionStatusResponse,
    responses={
        **_ERRORS,
        200: {"description": "the run ended; the session's status after it (usually CANCELLED)"},
        202: {
            "model": SessionStatusResponse,
            "description": "the run executes in another replica, which has not ended it yet: the cancel is "
                           "recorded and the run ends with ERROR CANCELLED (status still ACTIVE here)",
        },
        **errors({409: "nothing to cancel"}),
    },
)
async def cancel_session(
    session_id: SessionId, caller: RunsCaller, service: SessionServiceDep, response: Response
) -> SessionStatusResponse:
    """Cancel the running or paused run; it ends with ERROR ``CANCELLED``.

    Any replica accepts the cancel. When the run executes in another one, the request is recorded
    in the database and the owning replica stops the run at its next lease renewal
    (``AGENT_SERVICE_LEASE_RENEW_SECONDS``); this call waits up to about twice that interval for the end
    and answers 200 with the final status, or 202 with the status ACTIVE if the run had not ended
    by then (follow ``/events`` for its ERROR). A run whose replica is gone ends CANCELLED once its
    lease expires.
    """
    result = await service.cancel(session_id, caller)
    if not result.done:
        response.status_code = status.HTTP_202_ACCEPTED
    return result.status
