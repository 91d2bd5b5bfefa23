"""``python -m conversation_service --workers 2``: refused without Redis (the workers' WebSockets
need its cross-process fan-out), and with it two workers share the port and stop on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.servers import REPO_ROOT, ServiceProcess


def test_more_than_one_worker_without_redis_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "CONVERSATION_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/chat.db"}
    done = subprocess.run(
        [sys.executable, "-m", "conversation_service", "--workers", "2"], env=env, cwd=REPO_ROOT,
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode != 0
    assert "--workers 2 needs REDIS_URL" in done.stderr


async def test_two_workers_share_the_port_and_stop_on_sigterm(redis_url: str, tmp_path: Path) -> None:
    service = ServiceProcess("conversation_service", {
        "CONVERSATION_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/chat.db", "REDIS_URL": redis_url,
        "REDIS_CHANNEL_PREFIX": f"test-workers-{tmp_path.name}",
    }, args=["--workers", "2"])
    await service.start(tmp_path)
    try:
        seen: set[str] = set()
        deadline = time.monotonic() + 60
        while len(seen) < 2 and time.monotonic() < deadline:
            async with httpx.AsyncClient() as client:
                seen.add((await client.get(f"{service.url}/health")).headers["x-worker"])
        assert seen == {"1", "2"}
        async with httpx.AsyncClient() as client:
            metrics = (await client.get(f"{service.url}/metrics")).text
        assert "http_requests_total" in metrics
    finally:
        assert service.proc is not None
        service.proc.send_signal(signal.SIGTERM)
        code = await service.wait_exit(30)
    assert code == 0, service.logs()[-4000:]
