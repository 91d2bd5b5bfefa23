"""What the lifespan built (``AgentState``, on ``app.state.agent``), as typed ``Annotated`` dependencies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncEngine

from agent_service.metrics import AgentMetrics
from agent_service.profiles.service import ProfileStore
from agent_service.runs.leases import LeaseKeeper
from agent_service.runs.service import RunManager, RunService
from agent_service.runs.streaming import EventStreamer
from agent_service.sessions.service import SessionService
from agent_service.settings import AgentServiceSettings


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


def get_settings(request: Request) -> AgentServiceSettings:
    return request.app.state.agent.settings


def get_metrics(request: Request) -> AgentMetrics:
    return request.app.state.agent.metrics


def get_db_engine(request: Request) -> AsyncEngine:
    return request.app.state.agent.db_engine


def get_profiles(request: Request) -> ProfileStore:
    return request.app.state.agent.profiles


def get_run_service(request: Request) -> RunService:
    return request.app.state.agent.run_service


def get_session_service(request: Request) -> SessionService:
    return request.app.state.agent.session_service


def get_streamer(request: Request) -> EventStreamer:
    return request.app.state.agent.streamer


SettingsDep = Annotated[AgentServiceSettings, Depends(get_settings)]
MetricsDep = Annotated[AgentMetrics, Depends(get_metrics)]
DatabaseDep = Annotated[AsyncEngine, Depends(get_db_engine)]
ProfilesDep = Annotated[ProfileStore, Depends(get_profiles)]
RunServiceDep = Annotated[RunService, Depends(get_run_service)]
SessionServiceDep = Annotated[SessionService, Depends(get_session_service)]
StreamerDep = Annotated[EventStreamer, Depends(get_streamer)]
