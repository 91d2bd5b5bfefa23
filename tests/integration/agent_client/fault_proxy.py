"""A TCP proxy on loopback that breaks chosen connections, for stream-resumption tests.

It forwards bytes unchanged between a client and the real Agent Service. A connection whose
request line matches a planned fault has its response cut (the socket is closed after N bytes,
usually in the middle of an event) or stalled (bytes stop flowing, the socket stays open), the
way a proxy or a flaky network breaks a long SSE response. The client under test must use one
connection per request (no keep-alive) so each request line is seen.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

# The key the Agent Service under test accepts.
API_KEY = "integration-key-7f3a"


@dataclass
class Fault:
    request_prefix: bytes  # e.g. b"POST /api/v1/agent/execute"
    after_bytes: int  # response bytes forwarded before the fault
    stall: bool = False  # stop forwarding instead of closing


@dataclass
class FaultProxy:
    upstream_host: str
    upstream_port: int
    faults: list[Fault] = field(default_factory=list)
    request_lines: list[bytes] = field(default_factory=list)
    faults_applied: int = 0
    _tasks: set[asyncio.Task] = field(default_factory=set)

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        upstream_reader, upstream_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        try:
            head = await client_reader.readuntil(b"\r\n")
            self.request_lines.append(head.rstrip())
            fault = next((f for f in self.faults if head.startswith(f.request_prefix)), None)
            if fault is not None:
                self.faults.remove(fault)
            upstream_writer.write(head)
            up = asyncio.create_task(self._pipe(client_reader, upstream_writer, None))
            await self._pipe(upstream_reader, client_writer, fault)
            up.cancel()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for writer in (client_writer, upstream_writer):
                writer.close()
            self._tasks.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, fault: Fault | None) -> None:
        sent = 0
        try:
            while True:
                data = await reader.read(4096)
                if not data:
                    return
                if fault is not None and sent + len(data) >= fault.after_bytes:
                    writer.write(data[: fault.after_bytes - sent])
                    await writer.drain()
                    self.faults_applied += 1
                    if fault.stall:
                        await asyncio.Event().wait()  # held open until the client gives up
                    return
                writer.write(data)
                await writer.drain()
                sent += len(data)
        except ConnectionError:
            return

    @asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await server.wait_closed()
