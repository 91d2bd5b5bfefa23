"""Message routing: whether a chat message goes to the Agent Service or to the direct LLM (Story 4)."""

from conversation_service.routing.router import MessageRouter
from conversation_service.routing.schemas import FALLBACK_NOTICE, RouteDecision, RouteReason, RouteTarget
from conversation_service.routing.settings import RoutingSettings

__all__ = [
    "FALLBACK_NOTICE",
    "MessageRouter",
    "RouteDecision",
    "RouteReason",
    "RouteTarget",
    "RoutingSettings",
]
