"""GET /debug/heap exists only when DEBUG_HEAP_PROFILE is set, and reports sites and their growth."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI

from shared.heap_profile import HEAP_PATH, HeapProfileSettings, install_heap_profile


@pytest.fixture
def tracing_stopped() -> Iterator[None]:
    was_tracing = tracemalloc.is_tracing()
    yield
    if not was_tracing:
        tracemalloc.stop()


def _client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


async def test_absent_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEBUG_HEAP_PROFILE", raising=False)
    app = FastAPI()
    assert install_heap_profile(app) is None
    async with _client(app) as client:
        assert (await client.get(HEAP_PATH)).status_code == 404


async def test_enabled_by_environment(monkeypatch: pytest.MonkeyPatch, tracing_stopped: None) -> None:
    monkeypatch.setenv("DEBUG_HEAP_PROFILE", "1")
    assert HeapProfileSettings().heap_profile is True
    app = FastAPI()
    assert install_heap_profile(app) is not None
    assert tracemalloc.is_tracing()


async def test_reports_top_sites_and_growth(tracing_stopped: None) -> None:
    app = FastAPI()
    install_heap_profile(app, HeapProfileSettings(heap_profile=True))
    async with _client(app) as client:
        first = (await client.get(HEAP_PATH, params={"top": 5})).json()
        assert first["growth"] is None and first["gc_types_growth"] is None  # nothing to compare with yet
        assert first["gc_types"]["dict"] > 0 and first["gc_objects"] >= sum(first["gc_types"].values())
        assert first["traced_bytes"] > 0 and first["asyncio_tasks"] >= 1
        assert len(first["top"]) == 5 and all(site["bytes"] > 0 for site in first["top"])
        held = [bytearray(1000) for _ in range(2000)]  # about 2 MB kept alive on one line
        kept = [_Held() for _ in range(5000)]  # the gc's objects by type: 5 000 more of one
        second = (await client.get(HEAP_PATH, params={"top": 5})).json()
        assert held and kept
        assert second["gc_types_growth"]["_Held"] == 5000
        biggest = second["growth"][0]
        assert biggest["site"].endswith(f"test_heap_profile.py:{_line_of('bytearray(1000)')}")
        assert biggest["bytes_diff"] >= 2_000_000 and biggest["count_diff"] >= 2000
        assert (await client.get(HEAP_PATH, params={"top": 0})).status_code == 422


class _Held:
    pass


def _line_of(text: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if text in line and "_line_of" not in line)
