"""What the services depend on, as private instances a test may restart: PostgreSQL, Redis, and a TCP
relay that cuts the network between two processes.

The chaos tests restart these under load, so each test gets its own: a PostgreSQL cluster made with
``initdb`` in a temporary folder on a port of its own, a ``redis-server`` on a port of its own, never
the machine's shared servers. With ``CI=true`` a missing binary fails the test instead of skipping it.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import asyncpg
import pytest
import redis.asyncio as aioredis

from tests.support.databases import services_required
from tests.support.servers import free_port


def _missing(what: str) -> None:
    if services_required():
        pytest.fail(f"{what} is required (CI=true) for this test")
    pytest.skip(f"needs {what}; CI runs it")


def _postgres_bin() -> Path | None:
    """The newest installed PostgreSQL's server binaries (Debian keeps them off PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PrivatePostgres:
    """A PostgreSQL cluster of the test's own: ``start``, ``restart``, ``stop``, ``close``.

    As root (CI) the server runs as the ``postgres`` user, which initdb insists on; its folder is
    then made outside pytest's temporary tree, which only root may enter.
    """

    def __init__(self) -> None:
        self.bin = _postgres_bin()
        if self.bin is None:
            _missing("PostgreSQL's initdb")
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="tf-pg-"))
        self.data = self.root / "data"
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")

    def _run(self, *args: str, timeout: float = 60) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {result.stdout}{result.stderr}")

    def _ctl(self, action: str, *extra: str) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w", "-t", "60",
                  "-o", options, action, *extra)

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def url(self, database: str) -> str:
        """The SQLAlchemy URL of one of its databases."""
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    async def start(self) -> None:
        if not self.data.exists():
            await asyncio.to_thread(self._run, "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                                    "--no-sync")
        await asyncio.to_thread(self._ctl, "start")

    async def create_database(self, name: str) -> str:
        conn = await asyncpg.connect(self.dsn())
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        return self.url(name)

    async def restart(self) -> float:
        """A fast restart (every connection cut); how long the server was away."""
        started = time.monotonic()
        await asyncio.to_thread(self._ctl, "restart", "-m", "fast")
        return time.monotonic() - started

    async def stop(self) -> None:
        await asyncio.to_thread(self._ctl, "stop", "-m", "fast")

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    async def close(self) -> None:
        with contextlib.suppress(RuntimeError):
            await asyncio.to_thread(self._ctl, "stop", "-m", "immediate")
        shutil.rmtree(self.root, ignore_errors=True)


class PrivateRedis:
    """A ``redis-server`` of the test's own that keeps nothing on disk: a restart comes back empty."""

    def __init__(self) -> None:
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            _missing("redis-server")
        self.port = free_port()
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        client = aioredis.from_url(self.url)
        try:
            while True:
                try:
                    await client.ping()
                    return
                except (ConnectionError, OSError, aioredis.ConnectionError):
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.05)
        finally:
            await client.aclose()

    async def kill(self) -> None:
        """SIGKILL: every connection cut, every key gone."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()

    async def restart(self) -> float:
        """Killed and started again, empty; how long it was away."""
        started = time.monotonic()
        await self.kill()
        await self.start()
        return time.monotonic() - started

    async def close(self) -> None:
        await self.kill()


class TcpRelay:
    """Forwards loopback connections to ``target_port``; ``cut()`` resets every connection and refuses
    new ones (each is accepted and closed at once) until ``restore()``: a network partition as the
    processes on either side see it."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.cut_off = False
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_off:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    def cut(self) -> None:
        self.cut_off = True
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def restore(self) -> None:
        self.cut_off = False

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
