"""MCP servers for the Agent Service's tests: the SDK server of ``tests.support.mcp_server`` over stdio
(a process of its own) or Streamable HTTP (a real uvicorn on loopback), speaking both revisions or
2025-11-25 only, and Agent Services configured to use them."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.mcp_server import build, http_app, read_events
from tests.support.servers import REPO_ROOT, serve_app

PROFILES = """
profiles:
  - name: ops
    system_prompt: You operate the team's systems with their tools.
    tools: [calculator]
    mcp:
      - server: ops
  - name: readonly
    system_prompt: You may only read.
    tools: []
    mcp:
      - server: ops
        allow: ["add", "echo", "w*"]
        deny: ["wait"]
  - name: trusting
    system_prompt: You deploy without asking.
    tools: []
    mcp:
      - server: ops
        approval: {deploy: false, add: true}
"""


def stdio_server(events: Path, *, name: str = "ops", legacy: bool = False, hostile: bool = False,
                 **extra: Any) -> dict[str, Any]:
    args = ["-m", "tests.support.mcp_server", "stdio", "--events", str(events)]
    args += ["--legacy"] * legacy + ["--hostile"] * hostile
    return {"name": name, "command": sys.executable, "args": args, "cwd": str(REPO_ROOT), **extra}


@asynccontextmanager
async def http_server(events: Path, *, legacy: bool = False, hostile: bool = False) -> AsyncIterator[str]:
    """The test server over Streamable HTTP; yields its endpoint URL."""
    async with serve_http(build(legacy=legacy, events=events, hostile=hostile)) as url:
        yield f"{url}/mcp"


def serve_http(server, port: int | None = None):
    """uvicorn for the server's app; a client's open streams (a ``subscriptions/listen``) are cut
    after a second when it stops, as a server process that ends would cut them."""
    return serve_app(http_app(server), port=port, timeout_graceful_shutdown=1)


@pytest.fixture
def profiles_file(tmp_path: Path) -> Path:
    path = tmp_path / "profiles.yaml"
    path.write_text(PROFILES)
    return path


@pytest.fixture
def events(tmp_path: Path) -> Path:
    return tmp_path / "mcp-events.jsonl"


@pytest.fixture(params=["stdio-2026-07-28", "stdio-2025-11-25", "http-2026-07-28", "http-2025-11-25"])
async def ops_server(request, events: Path) -> AsyncIterator[dict[str, Any]]:
    """The test server as ``ops``, each transport at each revision: the server's configuration."""
    transport, revision = request.param.split("-", 1)
    legacy = revision == "2025-11-25"
    if transport == "stdio":
        yield stdio_server(events, legacy=legacy)
    else:
        async with http_server(events, legacy=legacy) as url:
            yield {"name": "ops", "url": url}


def events_of(path: Path, **match: Any) -> list[dict[str, Any]]:
    return [e for e in read_events(path) if all(e.get(k) == v for k, v in match.items())]


async def until(check, *, timeout: float = 15.0, what: str = "the condition") -> Any:
    """Poll ``check`` (sync or async) until it gives something true; that value. Fails after ``timeout``."""
    import asyncio
    import inspect
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)
