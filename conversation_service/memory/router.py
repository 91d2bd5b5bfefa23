"""``GET /memory``, ``DELETE /memory``, ``DELETE /memory/{id}``: the caller's own long-term memory.

The owner is always the token's user and organisation, never a parameter: nobody can name another
user's memory. A memory id that is not the caller's is a 404, like another user's conversation.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path

from conversation_service.agent_client import AgentNotFoundError, AgentServiceClient, AgentServiceError
from conversation_service.auth.tokens import AuthenticatedUser
from conversation_service.deps import CurrentUser
from conversation_service.errors import NotFound, Unavailable
from shared.app_state import started
from shared.http_contract import errors
from shared.protocol import MemoryDeleted, MemoryList, UserContext

router = APIRouter(prefix="/memory", tags=["memory"])
AgentClientDep = Annotated[AgentServiceClient, Depends(started("agent_client"))]

_ERRORS = errors({
    401: "missing, invalid or expired bearer token",
    404: "no such memory of the caller's",
    422: "a memory id that is not a number",
    503: "the Agent Service's memory cannot be reached",
})
UNAVAILABLE = "the agent's memory cannot be reached right now; try again in a moment"


def _owner(user: AuthenticatedUser) -> UserContext:
    return UserContext(user_id=user.user_id, org_id=user.org_id)


@router.get("", response_model=MemoryList, responses=_ERRORS)
async def list_memory(user: CurrentUser, client: AgentClientDep) -> MemoryList:
    """What the agent remembers about you (one entry per agent turn you completed), newest first."""
    try:
        return await client.list_memory(_owner(user))
    except AgentServiceError as exc:
        raise Unavailable(UNAVAILABLE) from exc


@router.delete("", response_model=MemoryDeleted, responses=_ERRORS)
async def forget_everything(user: CurrentUser, client: AgentClientDep) -> MemoryDeleted:
    """Delete everything the agent remembers about you."""
    try:
        return await client.forget(_owner(user))
    except AgentServiceError as exc:
        raise Unavailable(UNAVAILABLE) from exc


@router.delete("/{memory_id}", response_model=MemoryDeleted, responses=_ERRORS)
async def forget(
    user: CurrentUser, client: AgentClientDep, memory_id: Annotated[int, Path(ge=1, le=2**63 - 1)],
) -> MemoryDeleted:
    """Delete one memory; 404 when it is not one of yours."""
    try:
        return await client.forget(_owner(user), memory_id)
    except AgentNotFoundError as exc:
        raise NotFound("no such memory") from exc
    except AgentServiceError as exc:
        raise Unavailable(UNAVAILABLE) from exc
