"""Retries by error category, with tenacity (spec Story 7): 503/429 and connection failures with the
backoff, a 500 ``server_error_retries`` times, 408, other 4xx, protocol errors and spent timeouts
never. Only calls safe to repeat come here: GETs, cancel, and ``POST execute`` with its one
``Idempotency-Key`` (a repeat joins the run the first try started).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, stop_after_attempt

from conversation_service.agent_client.config import AgentClientConfig
from conversation_service.agent_client.errors import AgentServerError, AgentServiceError, AgentTimeoutError

logger = logging.getLogger(__name__)

T = TypeVar("T")

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RetryEvent:
    """What a retry or reconnect hook receives: which try comes next, why, and after how long."""

    operation: str
    attempt: int  # the number of the try about to be made (2 for the first retry)
    delay: float
    error: AgentServiceError


RetryHook = Callable[[RetryEvent], None]


async def call_with_retries(
    operation: str,
    fn: Callable[[], Awaitable[T]],
    *,
    config: AgentClientConfig,
    sleep: Sleep,
    on_retry: RetryHook | None = None,
) -> T:
    """Run ``fn`` until it succeeds, the error is not retryable, or the delays are spent."""
    delays = config.retry_delays
    server_errors = 0

    def worth_retrying(state: RetryCallState) -> bool:
        nonlocal server_errors
        assert state.outcome is not None
        exc = state.outcome.exception()
        if not isinstance(exc, AgentServiceError) or not exc.retryable:
            return False
        if isinstance(exc, AgentServerError):
            # Counted per call, so a 503 then a 500 still gives the 500 its one retry.
            server_errors += 1
            return server_errors <= config.server_error_retries
        return True

    def wait(state: RetryCallState) -> float:
        # tenacity asks for the wait before it checks the stop condition, so past the last delay
        # this value is computed but never slept.
        index = state.attempt_number - 1
        return delays[index] if index < len(delays) else 0.0

    def before_sleep(state: RetryCallState) -> None:
        assert state.outcome is not None and state.next_action is not None
        error = state.outcome.exception()
        assert isinstance(error, AgentServiceError)
        event = RetryEvent(operation, state.attempt_number + 1, state.next_action.sleep, error)
        logger.warning(
            "agent service call failed, retrying",
            extra={
                "operation": operation,
                "attempt": event.attempt,
                "delay_s": event.delay,
                "error_type": type(error).__name__,
                "status_code": getattr(error, "status_code", None),
            },
        )
        if on_retry is not None:
            on_retry(event)

    retrying = AsyncRetrying(
        sleep=sleep,
        stop=stop_after_attempt(config.max_attempts),
        wait=wait,
        retry=worth_retrying,
        before_sleep=before_sleep,
        reraise=True,
    )
    return await retrying(fn)


def reconnect_delay(config: AgentClientConfig, failed_reconnects: int, broken_for: float) -> float | None:
    """The pause before the next resumption of a stream that broke mid-run, or None: give up. The
    configured delays in turn, then the last one again while the stream has been broken for less
    than ``resume_budget`` (a short partition, a restart: the run goes on and its events wait)."""
    delays = config.reconnect_delays
    if not delays:
        return None
    if failed_reconnects < len(delays):
        return delays[failed_reconnects]
    return None if broken_for + delays[-1] > config.resume_budget else delays[-1]


async def within(deadline: float | None, awaitable: Awaitable[T], what: str) -> T:
    """``awaitable`` by the loop time ``deadline`` (None: no limit), else ``AgentTimeoutError`` saying ``what``."""
    if deadline is None:
        return await awaitable
    try:
        async with asyncio.timeout_at(deadline):
            return await awaitable
    except TimeoutError as exc:
        raise AgentTimeoutError(what) from exc
