"""How both services run under uvicorn and stop on SIGTERM.

A graceful stop, in order: the listening sockets close (a load balancer sends new connections to
another replica), the app's long-lived streams are told to end (``Shutdown.begun``: SSE streams end
cleanly, WebSockets are closed with 1012 by the protocol), uvicorn waits for the open connections
at most what is left of the grace period and cancels what still runs, then the lifespan shuts the
app down (the work it still holds gets the rest of the grace period), and the process exits 0.

uvicorn alone does not give that: with no ``timeout_graceful_shutdown`` it waits for every open
connection forever (one SSE stream or one client that stopped reading holds the stop up), and once
stopped it raises the SIGTERM it caught again, so the process died of the signal (exit 143) instead
of exiting 0.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from types import FrameType

import uvicorn

from shared.fastpath.process import tune_process


class Shutdown:
    """A service's graceful stop: whether it began, and how much of its grace period is left."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self.begun = asyncio.Event()
        self._deadline: float | None = None

    def begin(self) -> None:
        if self._deadline is None:
            self._deadline = time.monotonic() + self.grace_s
            self.begun.set()

    def remaining(self) -> float:
        """Seconds left of the grace period (all of it before the stop began)."""
        if self._deadline is None:
            return self.grace_s
        return max(0.0, self._deadline - time.monotonic())


class ServiceServer(uvicorn.Server):
    """uvicorn's server for a service process: tunes the process once started (the tuning is the
    service process's, ``shared.fastpath.process``, not every app's: tests and hosts build apps
    too) and stops within ``shutdown``'s grace period."""

    def __init__(self, config: uvicorn.Config, shutdown: Shutdown) -> None:
        super().__init__(config)
        self.graceful = shutdown

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:  # the app's start-up is done and the server listens
            tune_process()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if sig == signal.SIGTERM:
            # SIGTERM is how orchestrators stop a service: once it has stopped gracefully, that is
            # a normal exit, not a death by the signal uvicorn would raise again.
            captured = getattr(self, "_captured_signals", None)
            if captured and captured[-1] == sig:
                captured.pop()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Stop accepting first, so a client that reconnects when its stream ends reaches another replica.
        for server in self.servers:
            server.close()
        self.graceful.begin()
        self.config.timeout_graceful_shutdown = self.graceful.remaining()  # type: ignore[assignment]
        await super().shutdown(sockets)
