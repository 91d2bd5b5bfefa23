"""What becomes of a delegated message when something fails: one table, read in order.

| failure | the reply | dead letter | breaker |
|---|---|---|---|
| the breaker is open; the Agent Service unreachable, 503/429, 5xx or timing out after the retries | the direct LLM answers, with the notice "Advanced features temporarily unavailable, using standard chat" | yes (not for an open breaker: nothing was sent) | a failure |
| any other refusal of the request (400, 401, 404, 408, 409, 410, 413...) | ``Failed`` with the client's sentence for it | yes | a success: the service answered |
| the agent's own ERROR event | ``Failed`` with a sentence for its code (``CANCELLED``: ``Stopped``) | no: it is the agent's answer | a success |
| the event stream broke and could not be resumed | ``Interrupted`` | yes | a failure |
| a fault of this service's own (a bug, a write that failed) | ``Failed`` (``agent_failed``) | yes | – |
"""

from __future__ import annotations

import math
from enum import StrEnum

from conversation_service.agent_client import (
    AgentConnectError,
    AgentServerError,
    AgentServiceError,
    AgentTimeoutError,
    AgentUnavailableError,
)
from conversation_service.replies.endings import STREAM_INTERRUPTED, TURN_FAILED, Reason
from shared.breaker import CircuitOpenError
from shared.protocol import ErrorData


class Action(StrEnum):
    FALL_BACK = "fallback"  # the direct LLM answers instead, with a notice
    FAIL = "failed"  # the reply ends Failed, and the request goes to the dead letters


# In order: the first class that matches decides.
POLICY: tuple[tuple[type[BaseException], Action], ...] = (
    (CircuitOpenError, Action.FALL_BACK),
    (AgentUnavailableError, Action.FALL_BACK),
    (AgentServerError, Action.FALL_BACK),
    (AgentConnectError, Action.FALL_BACK),
    (AgentTimeoutError, Action.FALL_BACK),
    (AgentServiceError, Action.FAIL),
    (Exception, Action.FAIL),
)


def action_for(error: BaseException) -> Action:
    return next(action for kind, action in POLICY if isinstance(error, kind))


def says_agent_unhealthy(error: BaseException) -> bool:
    """Whether ``error`` counts against the breaker: the Agent Service itself failed, not this request."""
    return action_for(error) is Action.FALL_BACK and not isinstance(error, CircuitOpenError)


def failure_reason(error: BaseException) -> Reason:
    """What the user reads when ``error`` ends their reply."""
    if isinstance(error, AgentServiceError):
        return Reason(type(error).__name__, error.user_message, error.retryable)
    return TURN_FAILED


def interruption_reason(error: BaseException | None) -> Reason:
    """What the user reads when the agent's stream broke off (``error``: why, when known)."""
    if isinstance(error, AgentServiceError):
        return Reason(type(error).__name__, error.user_message, True)
    return STREAM_INTERRUPTED


# The agent's ERROR codes as users read them; the agent's own message may be technical.
AGENT_ERROR_TEXT = {
    "LLM_UNAVAILABLE": "The agent's language model is unavailable right now. Please try again in a moment.",
    "LLM_ERROR": "The agent's language model returned an error. Please try again.",
    "RATE_LIMITED": "Your organisation has reached its usage limit for the agent. Please try again later.",
    "MAX_STEPS_EXCEEDED": "The agent could not finish within its step limit. Try a simpler or more specific request.",
    # Earlier turns never cause it (the agent leaves the oldest out of its prompt): this message and
    # the agent's work on it alone outgrew the model's context.
    "TOKEN_LIMIT_EXCEEDED": "This request is too long for the agent. Try a shorter message or a smaller task.",
    "TOOL_ERROR": "One of the agent's tools failed. Please try again.",
    "CANCELLED": "The agent run was cancelled.",
    "INTERRUPTED": "The agent was interrupted by a restart. Please send your message again.",
    "QUESTION_EXPIRED": "Agent question expired, starting fresh conversation",
    "STORAGE_UNAVAILABLE": "The agent could not save its work (its database was unavailable). Please try again.",
    # An A2A agent's task ended FAILED, REJECTED or AUTH_REQUIRED (``a2a_agents.fold``).
    "A2A_FAILED": "The agent could not complete this request. Please try again.",
    "A2A_REJECTED": "The agent declined this request.",
    "A2A_AUTH_REQUIRED": "The agent needs a sign-in that this chat cannot give it.",
}
DEFAULT_AGENT_ERROR_TEXT = "The agent ran into a problem and could not answer. Please try again."
# The run's ERROR code when it was cancelled: on this side, only the user's stop cancels runs.
CANCELLED = "CANCELLED"


def agent_error_reason(error: ErrorData) -> Reason:
    text = AGENT_ERROR_TEXT.get(error.code, DEFAULT_AGENT_ERROR_TEXT)
    if error.retry_after_s is not None:
        text = f"{text.removesuffix(' Please try again later.')} Please try again in {math.ceil(error.retry_after_s)} s."
    return Reason(error.code, text, error.retryable)
