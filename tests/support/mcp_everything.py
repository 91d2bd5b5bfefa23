"""The MCP reference server ``@modelcontextprotocol/server-everything`` (Node.js), for the tests.

Its packages come from the committed lock file in ``tests/mcp_everything`` (``npm ci``, which
``.ci/run`` runs; here it is run on first use when the folder has none). With ``CI=true`` a server
that cannot be installed or started fails the test; elsewhere the test is skipped.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.databases import services_required
from tests.support.servers import REPO_ROOT, free_port

EVERYTHING_DIR = REPO_ROOT / "tests" / "mcp_everything"
PACKAGE = EVERYTHING_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything"
ENTRY = PACKAGE / "dist" / "index.js"
MIN_NODE = (20, 19)


def _unavailable(why: str) -> None:
    if services_required():
        pytest.fail(f"the MCP reference server is required (CI=true): {why}")
    pytest.skip(f"the MCP reference server cannot run here: {why}")


def installed() -> str:
    """The path of ``node``, once the server's packages are there (``npm ci`` from the lock file)."""
    node = shutil.which("node")
    if node is None:
        _unavailable("node is not installed")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    if tuple(int(part) for part in re.findall(r"\d+", version)[:2]) < MIN_NODE:
        _unavailable(f"it needs Node.js >= {'.'.join(map(str, MIN_NODE))}, found {version or 'none'}")
    if not ENTRY.exists():
        npm = shutil.which("npm")
        if npm is None:
            _unavailable("npm is not installed")
        result = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=EVERYTHING_DIR, capture_output=True,
                                text=True, check=False, timeout=300)
        if result.returncode != 0:
            _unavailable(f"npm ci failed: {result.stderr[-2000:]}")
    return node


def stdio_config(name: str = "everything") -> dict[str, Any]:
    """The server as an MCP server of the Agent Service, over stdio."""
    return {"name": name, "command": installed(), "args": [str(ENTRY), "stdio"], "cwd": str(EVERYTHING_DIR)}


@asynccontextmanager
async def running_http(log_dir: Path, timeout: float = 20.0) -> AsyncIterator[str]:
    """The server over Streamable HTTP in a process of its own; yields its endpoint URL."""
    node, port = installed(), free_port()
    log_path = log_dir / f"server-everything-{port}.log"
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            node, str(ENTRY), "streamableHttp", cwd=EVERYTHING_DIR, stdout=log, stderr=subprocess.STDOUT,
            env={"PATH": str(Path(node).parent), "PORT": str(port)},
        )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient() as http:
            while True:
                if proc.returncode is not None:
                    _unavailable(f"it exited with {proc.returncode}: {log_path.read_text()[-2000:]}")
                try:
                    await http.get(url, timeout=1)
                    break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    _unavailable(f"it did not answer within {timeout} s: {log_path.read_text()[-2000:]}")
                await asyncio.sleep(0.05)
        yield url
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
