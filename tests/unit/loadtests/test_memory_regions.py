"""``resident_by_region``: a process's RSS split by kind of mapping, as the hour's report reads it."""

from __future__ import annotations

import os
import sys
import threading

import psutil
import pytest

from loadtests.memory_regions import resident_by_region

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/PID/smaps is Linux's")


def test_the_regions_add_up_to_the_rss_and_small_objects_land_in_anonymous_mappings() -> None:
    before = resident_by_region(os.getpid())
    assert before is not None
    total_kib = sum(v for k, v in before.items() if k.endswith("_kib"))
    rss_kib = psutil.Process().memory_info().rss / 1024
    assert abs(total_kib - rss_kib) < 0.05 * rss_kib  # the same pages, read a moment apart
    assert before["files_kib"] > 0  # the interpreter and its libraries
    # About 30 MiB of small Python objects: CPython's arenas are anonymous mappings, not glibc's main heap.
    held = [(i, i) for i in range(350_000)]
    after = resident_by_region(os.getpid())
    assert after is not None
    assert after["anonymous_kib"] - before["anonymous_kib"] > 16 * 1024
    assert after["brk_heap_kib"] - before["brk_heap_kib"] < 8 * 1024
    del held


def test_what_a_thread_allocates_lands_in_a_thread_arena() -> None:
    before = resident_by_region(os.getpid())
    assert before is not None
    held: list[bytes] = []
    arrived, leave = threading.Event(), threading.Event()

    def allocate() -> None:
        # 1 000-byte objects are past CPython's small-object allocator: malloc, in this thread's arena.
        held.extend(os.urandom(1000) for _ in range(24_000))
        arrived.set()
        leave.wait()

    worker = threading.Thread(target=allocate)
    worker.start()
    try:
        assert arrived.wait(30)
        during = resident_by_region(os.getpid())
    finally:
        leave.set()
        worker.join()
    assert during is not None
    assert during["threads"] == before["threads"] + 1 and during["thread_arenas"] >= 1
    assert during["thread_arenas_kib"] - before["thread_arenas_kib"] > 16 * 1024
    assert during["brk_heap_kib"] - before["brk_heap_kib"] < 8 * 1024
    assert len(held) == 24_000


def test_a_process_that_is_gone_has_no_regions() -> None:
    gone = psutil.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert resident_by_region(gone.pid) is None
