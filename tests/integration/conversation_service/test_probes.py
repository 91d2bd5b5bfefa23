"""The chat's probes: ``/ready`` follows the database (Kubernetes sends requests elsewhere while it is away),
``/health`` is liveness and stays 200 (a replica is not restarted for PostgreSQL's outage: its writes wait
and retry), saying in its body that the database is unavailable."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx

from tests.integration.conversation_service.support import make_settings, running


async def test_ready_follows_the_database_while_health_stays_alive(tmp_path: Path) -> None:
    folder = tmp_path / "db"
    folder.mkdir()
    settings = make_settings(f"sqlite+aiosqlite:///{folder}/chat.db")
    async with running(settings) as (base, app), httpx.AsyncClient(base_url=base) as http:
        ready = await http.get("/ready")
        assert ready.status_code == 200 and ready.json() == {"status": "ready", "database": "ok"}
        assert (await http.get("/health")).json()["checks"]["database"] == "ok"

        # The database goes away: its file and folder removed, no pooled connection left to it.
        await app.state.storage.engine.dispose()
        shutil.rmtree(folder)
        ready = await http.get("/ready")
        assert ready.status_code == 503, ready.text
        assert ready.json()["error"] == "unavailable" and "Retry-After" in ready.headers
        health = await http.get("/health")
        assert health.status_code == 200
        assert health.json()["status"] == "unavailable" and health.json()["checks"]["database"] == "unavailable"

        folder.mkdir()  # an empty database answers SELECT 1 again
        assert (await http.get("/ready")).status_code == 200
