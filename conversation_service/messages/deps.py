"""The messages' dependency alias, for their routes and the WebSocket's."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from conversation_service.messages.service import MessageService
from shared.app_state import started

MessageServiceDep = Annotated[MessageService, Depends(started("messages"))]
