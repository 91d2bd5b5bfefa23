"""The Agent Service as several real processes on one PostgreSQL database: a reader of a run that lives
in another process is pushed each commit (LISTEN/NOTIFY) instead of polling, and ``--workers 2``
spreads requests over two workers, streams a run read through the other worker, sums /metrics and
stops every worker on SIGTERM with exit 0."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import statistics
import time
from pathlib import Path

import httpx
import pytest

from shared.sse import SSEDecoder, decode_envelope
from tests.support.servers import ServiceProcess

KEY = "workers-test-key"
ENV = {
    "AGENT_SERVICE_API_KEYS": KEY,
    "AGENT_SERVICE_MIGRATE_ON_START": "true",
    "LLM_PROVIDER": "builtin",
    "LLM_BUILTIN_FIRST_TOKEN_MS": "0",
    "LLM_BUILTIN_CHUNK_DELAY_MS": "40",  # a run of a second or two: long enough to follow it live
    "AGENT_SERVICE_MEMORY_ENABLED": "false",
}
HEADERS = {"X-API-Key": KEY}
BODY = {"message": "hello there, who are you?", "user_context": {"user_id": "u1"}}


async def _read_sse(resp: httpx.Response, arrivals: dict[int, float]) -> str | None:
    """Record when each seq arrived; the terminal event's type."""
    decoder = SSEDecoder()
    async for chunk in resp.aiter_bytes():
        for raw in decoder.feed(chunk):
            env = decode_envelope(raw)
            arrivals.setdefault(env.seq, time.perf_counter())
            if env.is_terminal:
                return env.type.value
    return None


def _metric(text: str, name: str, labels: str = "") -> float:
    pattern = rf"^{re.escape(name)}{re.escape(labels)} (\S+)$" if labels else rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$"
    return sum(float(m) for m in re.findall(pattern, text, re.MULTILINE))


async def _follow_run(owner_url: str, follower_url: str, follower_client: httpx.AsyncClient | None = None):
    """Execute on ``owner_url``; read the same run through ``follower_url`` from its first event."""
    own: dict[int, float] = {}
    followed: dict[int, float] = {}
    async with (
        httpx.AsyncClient(timeout=60) as owner,
        owner.stream("POST", f"{owner_url}/api/v1/agent/execute", json=BODY, headers=HEADERS) as resp,
    ):
        assert resp.status_code == 200, await resp.aread()
        session_id = resp.headers["X-Session-ID"]
        own_task = asyncio.create_task(_read_sse(resp, own))
        client = follower_client or httpx.AsyncClient(timeout=60)
        try:
            async with client.stream(
                "GET", f"{follower_url}/api/v1/agent/sessions/{session_id}/events", headers=HEADERS,
            ) as follow:
                assert follow.status_code == 200
                follow_end = await _read_sse(follow, followed)
                follower_worker = follow.headers.get("x-worker")
        finally:
            if follower_client is None:
                await client.aclose()
        own_end = await own_task
    return own, followed, own_end, follow_end, resp.headers.get("x-worker"), follower_worker


async def test_a_reader_on_another_process_is_pushed_each_commit(postgres_url: str, tmp_path: Path) -> None:
    a = ServiceProcess("agent_service", {**ENV, "AGENT_SERVICE_DATABASE_URL": postgres_url})
    b = ServiceProcess("agent_service", {**ENV, "AGENT_SERVICE_DATABASE_URL": postgres_url})
    await a.start(tmp_path)
    await b.start(tmp_path)
    try:
        own, followed, own_end, follow_end, _, _ = await _follow_run(a.url, b.url)
        async with httpx.AsyncClient() as client:
            metrics = (await client.get(f"{b.url}/metrics")).text
    finally:
        await a.stop()
        await b.stop()
    assert own_end == follow_end == "COMPLETE"
    assert sorted(followed) == sorted(own)
    # The follower on B read the log because it was told to, never because its 5 s poll came round.
    notified = _metric(metrics, "agent_follow_reads_total", '{cause="notified"}')
    assert notified >= 3, metrics
    assert _metric(metrics, "agent_follow_reads_total", '{cause="poll"}') == 0
    assert _metric(metrics, "agent_live_tail_notifications_total") >= notified
    # How far behind the owner's reader the other process's reader got each event (the group commit,
    # 50 ms, plus the notification): printed, and bounded well under the old 0.5 s poll.
    lags = [followed[seq] - own[seq] for seq in own if seq in followed]
    print(f"cross-process lag s: median={statistics.median(lags):.3f} max={max(lags):.3f} events={len(lags)}")
    assert statistics.median(lags) < 0.25


def _pids(metrics: str) -> set[int]:
    return {int(pid) for pid in re.findall(r'^agent_active_runs\{pid="(\d+)"\}', metrics, re.MULTILINE)}


async def test_two_workers_share_the_port_stream_across_each_other_and_stop_on_sigterm(
    postgres_url: str, tmp_path: Path,
) -> None:
    service = ServiceProcess("agent_service", {**ENV, "AGENT_SERVICE_DATABASE_URL": postgres_url}, args=["--workers", "2"])
    await service.start(tmp_path)
    try:
        # Requests spread: each fresh connection is accepted by whichever worker takes it first.
        seen: dict[str, int] = {}
        deadline = time.monotonic() + 60
        while len(seen) < 2 and time.monotonic() < deadline:
            async with httpx.AsyncClient() as client:
                worker = (await client.get(f"{service.url}/health")).headers["x-worker"]
            seen[worker] = seen.get(worker, 0) + 1
        assert set(seen) == {"1", "2"}, seen

        # A run executing on one worker, read through the other.
        for _ in range(20):
            own, followed, own_end, follow_end, owner_worker, follower_worker = await _follow_run(
                service.url, service.url,
            )
            if owner_worker != follower_worker:
                break
        assert owner_worker != follower_worker
        assert own_end == follow_end == "COMPLETE"
        assert sorted(followed) == sorted(own)

        async with httpx.AsyncClient() as client:
            metrics = (await client.get(f"{service.url}/metrics")).text
        # One gauge series per worker, counters summed over both.
        pids = _pids(metrics)
        assert len(pids) == 2, metrics
        health_requests = _metric(metrics, "http_requests_total", '{method="GET",route="/health",status="200"}')
        assert health_requests >= sum(seen.values())
        assert _metric(metrics, "agent_follow_reads_total", '{cause="notified"}') >= 1
    finally:
        assert service.proc is not None
        service.proc.send_signal(signal.SIGTERM)
        code = await service.wait_exit(30)
    assert code == 0, service.logs()[-4000:]
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def test_a_dead_worker_is_started_again(tmp_path: Path) -> None:
    service = ServiceProcess("agent_service", {
        **ENV, "AGENT_SERVICE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/agent.db",
    }, args=["--workers", "2"])
    await service.start(tmp_path)
    try:
        async with httpx.AsyncClient() as client:
            # Both workers have written their metrics once they have served something.
            deadline = time.monotonic() + 60
            while len(_pids((await client.get(f"{service.url}/metrics")).text)) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            before = _pids((await client.get(f"{service.url}/metrics")).text)
            assert len(before) == 2
            victim = min(before)
            os.kill(victim, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    now = _pids((await client.get(f"{service.url}/metrics")).text)
                except httpx.TransportError:  # a connection the killed worker had accepted
                    continue
                if len(now) == 2 and victim not in now:
                    break
                await asyncio.sleep(0.2)
            assert len(now) == 2 and victim not in now, now
    finally:
        await service.stop()
    assert service.proc.returncode == 0
