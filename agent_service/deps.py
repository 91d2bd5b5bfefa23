"""The service-wide parts the lifespan started (``AgentState`` in ``app.py``, on ``app.state.agent``),
as typed ``Annotated`` dependencies. A domain's own parts have their aliases beside its router, or
in its package's ``deps.py`` when other packages use them too (``events/deps.py``, ``memory/deps.py``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from sqlalchemy.ext.asyncio import AsyncEngine

from agent_service.metrics import AgentMetrics
from agent_service.settings import AgentServiceSettings
from shared.app_state import started

SettingsDep = Annotated[AgentServiceSettings, Depends(started("agent", "settings"))]
MetricsDep = Annotated[AgentMetrics, Depends(started("agent", "metrics"))]
DatabaseDep = Annotated[AsyncEngine, Depends(started("agent", "db_engine"))]
