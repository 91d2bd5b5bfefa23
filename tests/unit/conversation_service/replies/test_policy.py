"""The table of ``replies.policy``, row by row: what a delegated message becomes when something fails."""

from __future__ import annotations

import pytest

from conversation_service.agent_client import (
    AgentConnectError,
    AgentServerError,
    AgentTimeoutError,
    AgentUnavailableError,
)
from conversation_service.agent_client.errors import (
    AgentAuthError,
    AgentBadRequestError,
    AgentConflictError,
    AgentGoneError,
    AgentNotFoundError,
    AgentPayloadTooLargeError,
    AgentProtocolError,
    AgentRequestTimeoutError,
    AgentStreamError,
    error_class_for_status,
)
from conversation_service.replies.endings import STREAM_INTERRUPTED, TURN_FAILED
from conversation_service.replies.policy import (
    AGENT_ERROR_TEXT,
    DEFAULT_AGENT_ERROR_TEXT,
    Action,
    action_for,
    agent_error_reason,
    failure_reason,
    interruption_reason,
    says_agent_unhealthy,
)
from shared.breaker import CircuitOpenError
from shared.protocol import ErrorData

# The service itself is away or failing: the direct LLM answers and the breaker counts it.
UNHEALTHY = [
    AgentUnavailableError(503), AgentUnavailableError(429), AgentServerError(500), AgentServerError(502),
    AgentConnectError("refused"), AgentTimeoutError("no answer"),
]
# The service answered, and said no to this request: the reply fails with the client's sentence.
REFUSED = [
    AgentBadRequestError(400), AgentAuthError(401), AgentAuthError(403), AgentNotFoundError(404),
    AgentRequestTimeoutError(408), AgentConflictError(409), AgentGoneError(410), AgentPayloadTooLargeError(413),
    AgentBadRequestError(422), AgentProtocolError("bad frame"),
]


@pytest.mark.parametrize("error", UNHEALTHY, ids=lambda e: type(e).__name__ + str(getattr(e, "status_code", "")))
def test_the_agent_service_failing_falls_back_to_the_direct_llm_and_counts_against_the_breaker(error) -> None:
    assert action_for(error) is Action.FALL_BACK
    assert says_agent_unhealthy(error)


def test_an_open_breaker_falls_back_without_counting_again() -> None:
    assert action_for(CircuitOpenError(3.0)) is Action.FALL_BACK
    assert not says_agent_unhealthy(CircuitOpenError(3.0))


@pytest.mark.parametrize("error", REFUSED, ids=lambda e: type(e).__name__ + str(getattr(e, "status_code", "")))
def test_a_refused_request_fails_with_the_clients_sentence_and_the_service_counts_as_healthy(error) -> None:
    assert action_for(error) is Action.FAIL
    assert not says_agent_unhealthy(error)
    reason = failure_reason(error)
    assert (reason.code, reason.text) == (type(error).__name__, error.user_message)


def test_every_status_maps_to_the_row_of_its_class() -> None:
    assert {status: action_for(error_class_for_status(status)(status)) for status in (400, 404, 409, 413, 429, 500, 503, 504)} \
        == {400: Action.FAIL, 404: Action.FAIL, 409: Action.FAIL, 413: Action.FAIL,
            429: Action.FALL_BACK, 500: Action.FALL_BACK, 503: Action.FALL_BACK, 504: Action.FALL_BACK}


def test_a_fault_of_this_service_fails_the_reply_with_the_generic_reason() -> None:
    bug = KeyError("message_id")
    assert action_for(bug) is Action.FAIL
    assert not says_agent_unhealthy(bug)
    assert failure_reason(bug) == TURN_FAILED


def test_a_broken_stream_is_an_interruption_worth_trying_again() -> None:
    assert interruption_reason(None) == STREAM_INTERRUPTED
    reason = interruption_reason(AgentStreamError("cut"))
    assert (reason.code, reason.text, reason.retryable) == ("AgentStreamError", AgentStreamError.user_message, True)


@pytest.mark.parametrize("code", sorted(AGENT_ERROR_TEXT))
def test_the_agents_own_error_reads_as_its_codes_sentence(code: str) -> None:
    reason = agent_error_reason(ErrorData(code=code, message="technical detail", retryable=False))
    assert (reason.code, reason.text, reason.retryable) == (code, AGENT_ERROR_TEXT[code], False)
    assert "technical detail" not in reason.text


def test_an_unknown_agent_error_reads_as_the_default_and_a_wait_is_named_in_seconds() -> None:
    assert agent_error_reason(ErrorData(code="NEW_CODE", message="x")).text == DEFAULT_AGENT_ERROR_TEXT
    limited = agent_error_reason(ErrorData(code="RATE_LIMITED", message="x", retryable=True, retry_after_s=41.2))
    assert limited.text == ("Your organisation has reached its usage limit for the agent. Please try again in 42 s.")
    assert limited.retryable
