"""The process tuning a service applies once started as its own process."""

from __future__ import annotations

import gc
import sys

from shared.fastpath.process import DRIVER_THREAD_SWITCH_S, tune_process


def test_tune_process_shortens_gil_turns_and_freezes_the_heap() -> None:
    interval = sys.getswitchinterval()
    try:
        tune_process()
        assert sys.getswitchinterval() == DRIVER_THREAD_SWITCH_S
        assert gc.get_freeze_count() > 0  # what existed is out of later collections
    finally:
        gc.unfreeze()
        sys.setswitchinterval(interval)
