from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from agent_service.access.deps import CurrentCaller
from agent_service.profiles.service import ProfileStore
from shared.app_state import started
from shared.http_contract import errors
from shared.protocol import ProfileInfo

router = APIRouter(prefix="/api/v1/agent", tags=["profiles"])
ProfilesDep = Annotated[ProfileStore, Depends(started("agent", "profiles"))]


@router.get("/profiles", response_model=list[ProfileInfo], responses=errors({401: "missing or invalid X-API-Key"}))
async def list_profiles(_: CurrentCaller, profiles: ProfilesDep) -> list[ProfileInfo]:
    return [profile.info() for profile in profiles.all()]
