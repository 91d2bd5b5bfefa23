"""What the agent remembers about a user, for the ConversationService to show and delete.

The request names the user (``user_id``, ``org_id``); the caller must be allowed to act for that user
(a service for users of its organisations, an agent and a user token for themselves only: 403
otherwise, ``access.caller``). Every query is limited to that (organisation, user): another user's memory
is never listed, and deleting it is a 404.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from agent_service.access.caller import Caller
from agent_service.access.deps import MemoryCaller
from agent_service.errors import MemoryNotFound, MemoryOff
from agent_service.memory.deps import MemoryDep
from agent_service.memory.recall import LongTermMemory
from agent_service.memory.store import Owner
from shared.http_contract import errors
from shared.protocol import MAX_ID_CHARS, MemoryDeleted, MemoryItem, MemoryList, UserContext

router = APIRouter(prefix="/api/v1/agent/memory", tags=["memory"])

_ERRORS = errors({
    401: "missing or invalid X-API-Key or bearer token",
    403: "the caller may not act for this user or organisation, or may not use the memory API",
    404: "no such memory of this user",
    422: "a user or organisation id longer than allowed, or a memory id that is not a positive 64-bit number",
    503: "long-term memory is off",
})
UserId = Annotated[str, Query(min_length=1, max_length=MAX_ID_CHARS)]
OrgId = Annotated[str | None, Query(min_length=1, max_length=MAX_ID_CHARS)]
# A row id (BIGINT): a larger number names no memory, and the database could not even compare it.
MemoryId = Annotated[int, Path(ge=1, le=2**63 - 1)]
MAX_LISTED = 500


def _store(memory: LongTermMemory | None):
    if memory is None:
        raise MemoryOff("long-term memory is off (AGENT_SERVICE_MEMORY_ENABLED=false)")
    return memory.store


def _owner(caller: Caller, user_id: str, org_id: str | None) -> Owner:
    user = caller.acting_for(UserContext(user_id=user_id, org_id=org_id))
    return Owner(user.user_id, user.org_id)


@router.get("", response_model=MemoryList, responses=_ERRORS)
async def list_memory(caller: MemoryCaller, memory: MemoryDep, user_id: UserId, org_id: OrgId = None) -> MemoryList:
    memories = await _store(memory).list(_owner(caller, user_id, org_id), MAX_LISTED)
    return MemoryList(items=[MemoryItem.model_validate(m, from_attributes=True) for m in memories])


@router.delete("", response_model=MemoryDeleted, responses=_ERRORS)
async def forget_all(caller: MemoryCaller, memory: MemoryDep, user_id: UserId, org_id: OrgId = None) -> MemoryDeleted:
    return MemoryDeleted(deleted=await _store(memory).delete(_owner(caller, user_id, org_id)))


@router.delete("/{memory_id}", response_model=MemoryDeleted, responses=_ERRORS)
async def forget(
    caller: MemoryCaller, memory: MemoryDep, memory_id: MemoryId, user_id: UserId, org_id: OrgId = None,
) -> MemoryDeleted:
    deleted = await _store(memory).delete(_owner(caller, user_id, org_id), memory_id)
    if not deleted:
        raise MemoryNotFound(f"no memory {memory_id} of this user")
    return MemoryDeleted(deleted=deleted)
