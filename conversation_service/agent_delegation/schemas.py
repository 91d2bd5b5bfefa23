"""What a delegated turn sends (``TurnRequest``) and how far it got (``TurnAttempt``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conversation_service.agent_client import AgentEventStream
from conversation_service.agent_delegation.processor import AgentTurn
from shared.protocol import Answer, ExecuteRequest


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """What to send: a new message, or an answer to a pending question."""

    text: str
    answer: Answer | None = None
    route_reason: str = ""
    # The A2A agent the user named (``/agent <name>``): the conversation talks to it from now on.
    agent: str | None = None


@dataclass(slots=True)
class TurnAttempt:
    """How far a turn got: what its last resort (``TurnFailures.end_broken``) needs to end it like
    any other failure, on the turn's own path or on a takeover's."""

    row_id: str = ""  # the agent session row claimed ("": none yet)
    agent_name: str | None = None  # the A2A agent the turn talks to (None: the Agent Service)
    agent_session_id: str | None = None
    profile_name: str = ""
    history_stats: dict[str, Any] = field(default_factory=dict)  # how the history was windowed
    execute: ExecuteRequest | None = None
    stream: AgentEventStream | None = None  # the execute's (a takeover's: the resumed event stream), once called
    reply: AgentTurn | None = None  # the assistant message opened for the answer
    ended: bool = False  # the user has the turn's end (or the direct LLM has the turn): nothing left to end
