"""NORMAL (k=8) -> DEGRADED (k=3) for a window after a failure -> DOWN (k=0) when the breaker opens ->
DEGRADED after the reset timeout -> NORMAL on a success."""

from __future__ import annotations

from agent_service.memory.health import MemoryHealth, MemoryHealthState


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_states_and_how_many_memories_each_recalls() -> None:
    clock = Clock()
    health = MemoryHealth(degraded_window_s=15, fail_max=3, reset_timeout_s=60, clock=clock)
    assert health.state() is MemoryHealthState.NORMAL and health.top_k() == 8

    health.failed()
    assert health.state() is MemoryHealthState.DEGRADED and health.top_k() == 3
    clock.now = 16
    assert health.state() is MemoryHealthState.NORMAL, "the degraded window passed"

    health.failed()
    assert health.state() is MemoryHealthState.DEGRADED
    health.failed()  # three in a row: a window passing without a success does not reset the count
    assert health.state() is MemoryHealthState.DOWN and health.top_k() == 0
    clock.now = 16 + 60
    assert health.state() is MemoryHealthState.DEGRADED, "after the reset timeout: a probe at k=3"
    health.succeeded()
    assert health.state() is MemoryHealthState.NORMAL


def test_a_success_resets_the_failure_count() -> None:
    health = MemoryHealth(fail_max=2, clock=Clock())
    health.failed()
    health.succeeded()
    health.failed()
    assert health.state() is MemoryHealthState.DEGRADED
