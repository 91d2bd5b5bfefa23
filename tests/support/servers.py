"""Real servers on loopback for tests: in-process uvicorn, or a separate process.

In-process servers share the test's event loop (fast, and the test can reach the app's state);
a subprocess server is what a restart test needs, since a crash or restart must lose everything
that lived only in memory.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import uvicorn

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@asynccontextmanager
async def serve_app(
    app, port: int | None = None, ws: str | type = "websockets-sansio", **options: object
) -> AsyncIterator[str]:
    """Run an ASGI app with uvicorn on 127.0.0.1 inside this event loop; yield its base URL.
    ``ws`` and ``options`` (more ``uvicorn.Config`` options): as the service's ``__main__`` sets them."""
    port = port or free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", ws=ws, **options)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()  # re-raise a start-up failure
                raise RuntimeError("uvicorn stopped before it started")
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


class ServiceProcess:
    """``python -m <module> --host 127.0.0.1 --port P`` in a child process: this checkout's, or with
    ``python`` and ``cwd`` another installation's (an installed wheel, an earlier release)."""

    def __init__(
        self, module: str, env: dict[str, str], port: int | None = None, args: list[str] = (),
        python: str | Path = sys.executable, cwd: Path = REPO_ROOT,
    ) -> None:
        self.module = module
        self.args = list(args)
        self.port = port or free_port()
        self.python = str(python)
        self.cwd = cwd
        self.env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _spawn(self, log_dir: Path) -> subprocess.Popen:
        self.log_path = log_dir / f"{self.module}-{self.port}-{int(time.time() * 1000)}.log"
        with open(self.log_path, "wb") as log:
            return subprocess.Popen(
                [self.python, "-m", self.module, "--host", "127.0.0.1", "--port", str(self.port), *self.args],
                env=self.env,
                cwd=self.cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    async def start(self, log_dir: Path, timeout: float = 30.0) -> None:
        self.proc = self._spawn(log_dir)  # a fork and an open file per start: not worth a thread
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient() as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.module} exited early:\n{self.log_path.read_text()[-4000:]}")
                try:
                    if (await client.get(f"{self.url}/health", timeout=1.0)).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.05)
        raise TimeoutError(f"{self.module} did not become healthy:\n{self.log_path.read_text()[-4000:]}")

    async def wait_exit(self, timeout: float) -> int | None:
        """The exit code once the process has ended, or None if it still runs after ``timeout``."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return self.proc.poll()

    async def stop(self, kill: bool = False) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        deadline = time.monotonic() + 15
        while self.proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def logs(self) -> str:
        return self.log_path.read_text() if self.log_path and self.log_path.exists() else ""
