import pytest

from shared.breaker import BreakerState, CircuitBreaker, CircuitOpenError


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(clock: FakeClock, changes: list | None = None) -> CircuitBreaker:
    return CircuitBreaker(
        failure_threshold=5, window_seconds=60, open_seconds=30, clock=clock,
        on_change=(changes.append if changes is not None else None),
    )


def fail(breaker: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        breaker.acquire()
        breaker.record_failure()


def test_opens_after_five_failures_within_a_minute():
    clock, changes = FakeClock(), []
    breaker = make(clock, changes)
    fail(breaker, 4)
    assert breaker.state is BreakerState.CLOSED
    fail(breaker, 1)
    assert breaker.state is BreakerState.OPEN
    assert changes == [BreakerState.OPEN]
    with pytest.raises(CircuitOpenError) as excinfo:
        breaker.acquire()
    assert 0 < excinfo.value.retry_after <= 30


def test_failures_outside_the_window_do_not_count():
    clock = FakeClock()
    breaker = make(clock)
    fail(breaker, 4)
    clock.now += 61
    fail(breaker, 4)
    assert breaker.state is BreakerState.CLOSED
    assert breaker.recent_failures == 4


def test_successes_do_not_hide_intermittent_failures():
    clock = FakeClock()
    breaker = make(clock)
    for _ in range(5):
        breaker.acquire()
        breaker.record_success()
        fail(breaker, 1)
    assert breaker.state is BreakerState.OPEN


def test_half_open_lets_exactly_one_probe_through():
    clock = FakeClock()
    breaker = make(clock)
    fail(breaker, 5)
    clock.now += 30
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.acquire() is True  # the probe
    for _ in range(3):
        with pytest.raises(CircuitOpenError):
            breaker.acquire()
    assert not breaker.allows_calls()
    breaker.record_success()
    assert breaker.state is BreakerState.CLOSED
    assert breaker.acquire() is False
    assert breaker.recent_failures == 0


def test_failed_probe_reopens_for_a_full_period():
    clock = FakeClock()
    breaker = make(clock)
    fail(breaker, 5)
    clock.now += 30
    assert breaker.acquire() is True
    breaker.record_failure()
    assert breaker.state is BreakerState.OPEN
    clock.now += 29
    assert breaker.state is BreakerState.OPEN
    clock.now += 1
    assert breaker.state is BreakerState.HALF_OPEN


def test_released_probe_frees_the_slot():
    clock = FakeClock()
    breaker = make(clock)
    fail(breaker, 5)
    clock.now += 30
    assert breaker.acquire() is True
    breaker.release()
    assert breaker.acquire() is True
