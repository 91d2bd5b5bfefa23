"""Process tuning for the services' latency, applied once their start-up is done (docs/benchmarks-history.md,
"Stalls and waits on the first chunk")."""

from __future__ import annotations

import gc
import sys

# How long the thread holding the GIL keeps it once another thread asks (CPython's default: 5 ms).
DRIVER_THREAD_SWITCH_S = 0.0005


def tune_process() -> None:
    """Shorter GIL turns for the database drivers' threads, and a frozen start-up heap.

    - aiosqlite runs each connection's statements in a thread, which needs the GIL to hand its
      result back; while the event loop thread is busy streaming, the default switch interval let
      the loop keep the GIL up to 5 ms per statement, so a three-statement write transaction held
      SQLite's only write lock for 10-50 ms. Only threads that ask for the GIL are affected; with
      none waiting the loop thread is never interrupted.
    - What start-up built (settings, the app, the tokenizer's vocabulary, pools...) lives as long
      as the process, yet every full collection walked all of it: a generation-2 pass stopped the
      event loop for 60-120 ms, the largest single stall seen in a first chunk. Frozen objects are
      left out of every later collection; start-up's garbage is collected first.
    """
    sys.setswitchinterval(DRIVER_THREAD_SWITCH_S)
    gc.collect()
    gc.freeze()
