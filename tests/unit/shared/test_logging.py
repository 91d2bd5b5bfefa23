"""``configure_logging`` in a process of its own, as a service sets it up: a real uvicorn server's
records and a real httpx client's request lines come out as plain JSON (no terminal colour codes),
and only successful probe requests (/health, /ready, /metrics) are left out."""

from __future__ import annotations

import subprocess
import sys

import orjson

from tests.support.servers import REPO_ROOT

SCRIPT = r"""
import asyncio, socket
import httpx, uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from shared.logging import configure_logging

async def ok(request):
    return PlainTextResponse("ok")

async def down(request):
    return PlainTextResponse("down", status_code=503)

app = Starlette(routes=[Route("/health", ok), Route("/metrics", ok), Route("/ready", down),
                        Route("/conversations", ok)])

async def main():
    configure_logging("logging-test")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_config=None))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}") as client:
        for path in ("/health", "/metrics", "/ready", "/conversations?page=2"):
            await client.get(path)
    server.should_exit = True
    await task

asyncio.run(main())
"""


def _log_lines() -> list[dict]:
    done = subprocess.run([sys.executable, "-c", SCRIPT], check=False, cwd=REPO_ROOT, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    assert b"\x1b" not in done.stderr and b"\\u001b" not in done.stderr, done.stderr.decode()
    return [orjson.loads(line) for line in done.stderr.splitlines()]


def test_structured_lines_carry_no_colour_codes_and_skip_successful_probes() -> None:
    lines = _log_lines()
    messages = [line["msg"] for line in lines]
    assert any(m.startswith("Started server process [") for m in messages), messages
    assert not [line for line in lines if "color_message" in line]
    requested = [m for m in messages if m.startswith("HTTP Request:")]
    # A failed probe is news (kept); a successful one every few seconds is noise (dropped).
    assert len(requested) == 2, requested
    assert "/ready" in requested[0] and "503" in requested[0]
    assert "/conversations?page=2" in requested[1] and "200" in requested[1]
