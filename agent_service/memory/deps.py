"""Long-term memory as a dependency (None when AGENT_SERVICE_MEMORY_ENABLED is off)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from agent_service.memory.recall import LongTermMemory
from shared.app_state import started

MemoryDep = Annotated[LongTermMemory | None, Depends(started("agent", "memory"))]
