"""Opt-in heap profiling of a running service: ``GET /debug/heap`` (``loadtests/leak_check.py``).

Off unless ``DEBUG_HEAP_PROFILE=1``: tracing costs CPU and memory on every allocation, so disabled
the route does not exist and nothing is traced. The answer holds file names, line numbers, sizes
and counts, never object contents; still, do not enable it on a replica reachable from outside.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import os
import sys
import tracemalloc
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Query
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

HEAP_PATH = "/debug/heap"
_MAX_TOP = 200


class HeapProfileSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DEBUG_", extra="ignore")

    heap_profile: bool = False
    # Frames kept per allocation; 1 groups by the allocating line (cheapest), more show callers.
    heap_profile_frames: Annotated[int, Field(ge=1, le=32)] = 1


class HeapProfiler:
    """Takes snapshots and diffs each against the previous one (held here, one at a time)."""

    def __init__(self, frames: int) -> None:
        self.frames = frames
        self._previous: tracemalloc.Snapshot | None = None
        self._previous_types: collections.Counter[str] | None = None
        self._roots = sorted({p for p in sys.path if p} | {sys.prefix}, key=len, reverse=True)

    def start(self) -> None:
        if not tracemalloc.is_tracing():
            tracemalloc.start(self.frames)

    def _where(self, frame: tracemalloc.Frame) -> str:
        # Paths relative to the interpreter or project root: shorter, and no host layout in the output.
        name = frame.filename
        for root in self._roots:
            if root and name.startswith(root + os.sep):
                name = name[len(root) + 1:]
                break
        return f"{name}:{frame.lineno}"

    def _site(self, stat: tracemalloc.Statistic | tracemalloc.StatisticDiff) -> str:
        return " <- ".join(self._where(frame) for frame in stat.traceback)

    def report(self, top: int, asyncio_tasks: int) -> dict[str, Any]:
        gc.collect()  # count what is still reachable, not what a pending collection would free
        snapshot = tracemalloc.take_snapshot().filter_traces((
            tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
            tracemalloc.Filter(False, "<unknown>"),
        ))
        key = "traceback" if self.frames > 1 else "lineno"
        stats = snapshot.statistics(key)
        # Objects the gc tracks, by type: a site that grows says where, a type that grows says what.
        types = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
        current, peak = tracemalloc.get_traced_memory()
        result: dict[str, Any] = {
            "traced_bytes": current,
            "peak_bytes": peak,
            "snapshot_bytes": sum(s.size for s in stats),
            "sites": len(stats),
            "asyncio_tasks": asyncio_tasks,
            "gc_objects": sum(types.values()),
            "gc_types": dict(types.most_common(top)),
            "gc_types_growth": None,
            "top": [{"site": self._site(s), "bytes": s.size, "count": s.count} for s in stats[:top]],
            "growth": None,
        }
        if self._previous is not None:
            diff = [d for d in snapshot.compare_to(self._previous, key) if d.size_diff]
            diff.sort(key=lambda d: d.size_diff, reverse=True)
            result["growth"] = [
                {"site": self._site(d), "bytes": d.size, "bytes_diff": d.size_diff, "count": d.count,
                 "count_diff": d.count_diff}
                for d in diff[:top]
            ]
        if self._previous_types is not None:
            grown = types.copy()
            grown.subtract(self._previous_types)
            result["gc_types_growth"] = {
                name: n for name, n in sorted(grown.items(), key=lambda kv: -abs(kv[1]))[:top] if n
            }
        self._previous = snapshot
        self._previous_types = types
        return result


def install_heap_profile(app: FastAPI, settings: HeapProfileSettings | None = None) -> HeapProfiler | None:
    """Starts tracing and adds ``GET /debug/heap`` when enabled; otherwise does nothing."""
    settings = settings or HeapProfileSettings()
    if not settings.heap_profile:
        return None
    profiler = HeapProfiler(settings.heap_profile_frames)
    profiler.start()
    router = APIRouter(include_in_schema=False)

    @router.get(HEAP_PATH)
    async def heap(top: Annotated[int, Query(ge=1, le=_MAX_TOP)] = 25) -> dict[str, Any]:
        # Snapshots of a big heap take a while; off the loop so streams keep flowing meanwhile.
        return await asyncio.to_thread(profiler.report, top, len(asyncio.all_tasks()))

    app.include_router(router)
    return profiler
