"""The routing decision: where a message goes, why, and what the user should be told."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class RouteTarget(StrEnum):
    AGENT = "AGENT"
    DIRECT = "DIRECT"

    @property
    def path(self) -> str:
        """The reply path's name in the API's route and in message metadata."""
        return "agent" if self is RouteTarget.AGENT else "direct_llm"


class RouteReason(StrEnum):
    EXPLICIT_COMMAND = "explicit_command"  # /agent or @agent
    INTENT_KEYWORD = "intent_keyword"  # a configured keyword such as "search"
    ACTIVE_SESSION = "active_session"  # the conversation already talks to the agent
    ROUTING_DISABLED = "routing_disabled"  # AGENT_ROUTING_ENABLED=false
    ORG_DISABLED = "org_disabled"
    USER_DISABLED = "user_disabled"
    AGENT_UNAVAILABLE = "agent_unavailable"  # the agent was wanted but the breaker says no
    DEFAULT = "default"  # nothing asked for the agent
    PENDING_QUESTION = "pending_question"  # the message answers the agent's pending question


class RouteDecision(BaseModel):
    model_config = ConfigDict(frozen=True)

    target: RouteTarget
    reason: RouteReason
    # The text to send on: the user's message with a leading /agent or @agent removed.
    message: str
    # Shown to the user as a ``notice`` frame when set (fallback or agent not enabled).
    notice: str | None = None
    # Whether the user asked for the agent explicitly, whatever the outcome.
    explicit: bool = False
    # The A2A agent the user named (``/agent <name> ...``), whose name ``message`` no longer holds.
    agent: str | None = None
