"""Stop a streaming reply; regenerate the last one (also the Retry of a failed one)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, status

from conversation_service.deps import CurrentUser
from conversation_service.reply_control.schemas import RegenerateAccepted, StopAccepted
from conversation_service.reply_control.service import ReplyControl
from shared.app_state import started
from shared.http_contract import errors

router = APIRouter(prefix="/conversations", tags=["messages"])
ReplyControlDep = Annotated[ReplyControl, Depends(started("reply_control"))]

_ERRORS = {401: "missing, invalid or expired bearer token",
           404: "no such conversation of the caller's, or no such message in it"}


@router.post(
    "/{conversation_id}/messages/{message_id}/stop",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=StopAccepted,
    responses=errors({
        **_ERRORS, 409: "the message is not an assistant reply that is still streaming",
        503: "the Agent Service could not be reached to stop the agent's run; try again",
    }),
)
async def stop_reply(
    conversation_id: str, message_id: str, control: ReplyControlDep, user: CurrentUser
) -> StopAccepted:
    """Stop a reply while it streams, whichever replica streams it. It ends for every client with
    ``message.completed`` whose ``status`` is ``stopped``, keeping its text so far; the message
    list shows it ``stopped``. An agent reply's run is cancelled in the Agent Service."""
    return await control.stop(user, conversation_id, message_id)


@router.post(
    "/{conversation_id}/messages/{message_id}/regenerate",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=RegenerateAccepted,
    responses=errors({
        **_ERRORS, 409: "not the conversation's last reply, not ended yet, a question of the agent's, "
                        "or a reply is still streaming",
        503: "busy: every place for a reply is taken and the queue is full; retry after Retry-After",
    }),
)
async def regenerate_reply(
    conversation_id: str, message_id: str, control: ReplyControlDep, user: CurrentUser
) -> RegenerateAccepted:
    """Answer the last reply's user message again, in its place: the reply is marked ``replaced``
    (``message.replaced`` tells every page to drop it) and a new answer streams, routed afresh to
    the agent or the direct LLM. Serves Retry too: a failed, interrupted or stopped last reply may
    be regenerated."""
    return await control.regenerate(user, conversation_id, message_id)
