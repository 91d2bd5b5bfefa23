"""What the lifespan built (``AgentState``, on ``app.state.agent``), as typed ``Annotated`` dependencies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncEngine

from agent_service.events.streaming import EventStreamer
from agent_service.memory.recall import LongTermMemory
from agent_service.metrics import AgentMetrics
from agent_service.profiles.service import ProfileStore
from agent_service.runs.leases import LeaseKeeper
from agent_service.runs.manager import RunManager
from agent_service.runs.service import RunService
from agent_service.sessions.service import SessionService
from agent_service.settings import AgentServiceSettings
from shared.oidc.verifier import AccessTokenVerifier

if TYPE_CHECKING:
    from agent_service.a2a.transport import A2AParts


@dataclass(frozen=True, slots=True)
class AgentState:
    settings: AgentServiceSettings
    metrics: AgentMetrics
    db_engine: AsyncEngine
    profiles: ProfileStore
    run_manager: RunManager
    lease_keeper: LeaseKeeper
    run_service: RunService
    session_service: SessionService
    streamer: EventStreamer
    # None when AGENT_SERVICE_MEMORY_ENABLED is off.
    memory: LongTermMemory | None = None
    # Access tokens of the identity provider (AGENT_SERVICE_AUTH_OIDC_ISSUER); None: API keys only.
    token_verifier: AccessTokenVerifier | None = None
    # The A2A server's parts (its routes reach them through ``agent_service.a2a.transport.parts``).
    a2a: A2AParts | None = None


def _part(name: str) -> Any:
    # ``async`` although it never waits: FastAPI runs a plain ``def`` dependency in its thread
    # pool, a thread hop per dependency per request for an attribute read.
    async def get(request: Request) -> Any:
        return getattr(request.app.state.agent, name)

    return Depends(get)


SettingsDep = Annotated[AgentServiceSettings, _part("settings")]
MetricsDep = Annotated[AgentMetrics, _part("metrics")]
DatabaseDep = Annotated[AsyncEngine, _part("db_engine")]
ProfilesDep = Annotated[ProfileStore, _part("profiles")]
RunServiceDep = Annotated[RunService, _part("run_service")]
SessionServiceDep = Annotated[SessionService, _part("session_service")]
StreamerDep = Annotated[EventStreamer, _part("streamer")]
MemoryDep = Annotated[LongTermMemory | None, _part("memory")]
