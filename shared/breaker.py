"""A circuit breaker around a service we call: the chat's around the Agent Service and each A2A
agent, the Agent Service's around each MCP server.

Closed: calls pass; failures are remembered with their time. When ``failure_threshold`` failures
fall inside the last ``window_seconds`` (spec: 5 in 60 s) the breaker opens. Open: calls are refused
at once (the chat's MessageRouter sends the message to the direct LLM with a notice; an MCP tool
call fails at once and the model is told). After
``open_seconds`` it is half-open: exactly ONE probe call is let through; its success closes the
breaker, its failure opens it again. Other callers keep being refused while the probe runs.

A sliding window rather than a consecutive-failure counter: an agent that fails every other call is
unhealthy, and a counter reset by each success would never notice.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from enum import StrEnum


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitOpenError(Exception):
    """Raised by ``acquire()`` when the call must not be attempted."""

    def __init__(self, retry_after: float, service: str = "agent service") -> None:
        super().__init__(f"{service} circuit is open; next probe in {retry_after:.1f} s")
        self.retry_after = retry_after


class CircuitBreaker:
    def __init__(
        self,
        *,
        failure_threshold: int = 5,
        window_seconds: float = 60.0,
        open_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[BreakerState], None] | None = None,
        service: str = "agent service",
    ) -> None:
        self.service = service
        self.failure_threshold = failure_threshold
        self.window_seconds = window_seconds
        self.open_seconds = open_seconds
        self._clock = clock
        self._on_change = on_change
        self._failures: deque[float] = deque()
        self._state = BreakerState.CLOSED
        self._opened_at = 0.0
        self._probe_in_flight = False

    @property
    def state(self) -> BreakerState:
        if self._state is BreakerState.OPEN and self._clock() - self._opened_at >= self.open_seconds:
            self._set(BreakerState.HALF_OPEN)
        return self._state

    def retry_after(self) -> float:
        """Seconds until the next probe may be made (0 unless open)."""
        if self.state is not BreakerState.OPEN:
            return 0.0
        return max(0.0, self.open_seconds - (self._clock() - self._opened_at))

    @property
    def recent_failures(self) -> int:
        self._prune()
        return len(self._failures)

    def allows_calls(self) -> bool:
        """Whether a call would be let through now (without taking the probe slot)."""
        state = self.state
        return state is BreakerState.CLOSED or (state is BreakerState.HALF_OPEN and not self._probe_in_flight)

    def acquire(self) -> bool:
        """Ask to make a call. Returns True when this call is the half-open probe.

        Raises ``CircuitOpenError`` when the call must not be made. Every successful acquire must be
        followed by exactly one ``record_success()`` or ``record_failure()`` (or ``release()`` when the
        call ended for a reason that says nothing about the service's health).
        """
        if not self.allows_calls():
            raise CircuitOpenError(self.retry_after(), self.service)
        if self._state is BreakerState.CLOSED:
            return False
        self._probe_in_flight = True
        return True

    def record_success(self) -> None:
        self._probe_in_flight = False
        if self._state is not BreakerState.CLOSED:
            self._failures.clear()
            self._set(BreakerState.CLOSED)

    def record_failure(self) -> None:
        now = self._clock()
        if self._state is BreakerState.HALF_OPEN or self._probe_in_flight:
            self._probe_in_flight = False
            self._open(now)
            return
        self._failures.append(now)
        self._prune(now)
        if self._state is BreakerState.CLOSED and len(self._failures) >= self.failure_threshold:
            self._open(now)

    def release(self) -> None:
        """End a call that neither proves nor disproves health (e.g. cancelled by the user)."""
        self._probe_in_flight = False

    def _open(self, now: float) -> None:
        self._opened_at = now
        self._set(BreakerState.OPEN)

    def _prune(self, now: float | None = None) -> None:
        horizon = (now if now is not None else self._clock()) - self.window_seconds
        while self._failures and self._failures[0] < horizon:
            self._failures.popleft()

    def _set(self, state: BreakerState) -> None:
        if state is not self._state:
            self._state = state
            if self._on_change is not None:
                self._on_change(state)
