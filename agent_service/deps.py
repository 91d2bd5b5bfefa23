"""Typed access to the resources the lifespan created (``app.state``), as ``Annotated`` aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from agent_service.profiles.service import ProfileStore
from agent_service.runs.service import RunService
from agent_service.runs.streaming import EventStreamer
from agent_service.sessions.service import SessionService
from agent_service.settings import AgentServiceSettings


def get_settings(request: Request) -> AgentServiceSettings:
    return request.app.state.settings


def get_profiles(request: Request) -> ProfileStore:
    return request.app.state.profiles


def get_run_service(request: Request) -> RunService:
    return request.app.state.run_service


def get_session_service(request: Request) -> SessionService:
    return request.app.state.session_service


def get_streamer(request: Request) -> EventStreamer:
    return request.app.state.streamer


SettingsDep = Annotated[AgentServiceSettings, Depends(get_settings)]
ProfilesDep = Annotated[ProfileStore, Depends(get_profiles)]
RunServiceDep = Annotated[RunService, Depends(get_run_service)]
SessionServiceDep = Annotated[SessionService, Depends(get_session_service)]
StreamerDep = Annotated[EventStreamer, Depends(get_streamer)]
