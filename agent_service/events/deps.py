"""The event log's dependency alias, for the routes that stream a session's events."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from agent_service.events.streaming import EventStreamer
from shared.app_state import started

StreamerDep = Annotated[EventStreamer, Depends(started("agent", "streamer"))]
