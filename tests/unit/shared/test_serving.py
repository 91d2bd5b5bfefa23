"""``shared.serving.Shutdown``: the grace period starts once, when the stop begins."""

from __future__ import annotations

import time

from shared.serving import Shutdown


def test_the_whole_grace_period_remains_until_the_stop_begins_then_it_runs_out() -> None:
    shutdown = Shutdown(grace_s=0.2)
    assert shutdown.remaining() == 0.2 and not shutdown.begun.is_set()
    shutdown.begin()
    assert shutdown.begun.is_set()
    first = shutdown.remaining()
    assert 0 < first <= 0.2
    shutdown.begin()  # a second SIGTERM does not restart the clock
    assert shutdown.remaining() <= first
    deadline = time.monotonic() + 5
    while shutdown.remaining() > 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert shutdown.remaining() == 0.0
