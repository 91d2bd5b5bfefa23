"""A TCP load balancer on loopback, as a Kubernetes Service or nginx stands in front of replicas: each new
connection goes to the first upstream in rotation that accepts it. ``remove`` takes an upstream out of
rotation (as Kubernetes drops a stopping pod from its endpoints) and closes the connections to it, so that
the clients' pooled keep-alive connections do not carry new requests there either."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Balancer:
    def __init__(self) -> None:
        self.rotation: list[int] = []
        self._server: asyncio.Server | None = None
        self._pipes: dict[int, set[asyncio.Task]] = defaultdict(set)

    def remove(self, port: int) -> None:
        self.rotation.remove(port)
        for pipe in self._pipes.pop(port, set()):
            pipe.cancel()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for port in list(self.rotation):
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                continue
            pipes = [asyncio.create_task(_pipe(reader, up_writer)), asyncio.create_task(_pipe(up_reader, writer))]
            self._pipes[port].update(pipes)
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            for pipe in pipes:
                pipe.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
            self._pipes[port].difference_update(pipes)
            _close(up_writer)
            break
        _close(writer)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()


def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, RuntimeError):
        writer.close()


@asynccontextmanager
async def running_balancer() -> AsyncIterator[Balancer]:
    balancer = Balancer()
    balancer._server = await asyncio.start_server(balancer._handle, "127.0.0.1", 0)
    try:
        yield balancer
    finally:
        balancer._server.close()
        pipes = [pipe for port in balancer._pipes.values() for pipe in port]
        for pipe in pipes:
            pipe.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)
