"""Several worker processes of one service on one host: ``python -m <service> --workers N``.

The parent binds the listening socket once and spawns N workers that each serve it with their own
app and event loop (the kernel hands each new connection to one of them). The parent serves nothing:

- SIGTERM or SIGINT to the parent sends SIGTERM to every worker, each stops gracefully as a single
  process does (``shared.serving``), and the parent exits 0 once all of them did (a worker's non-zero
  exit code is the parent's). Workers sit in their own process group, so a Ctrl-C on the terminal
  reaches only the parent, which stops each worker once; a worker whose parent died stops itself.
- A worker that dies is started again (after 1, 2, 4 ... 30 s if it keeps dying young), unless it
  failed its start-up (uvicorn's exit code 3): the configuration or a dependency is wrong, so the
  parent stops the others and exits 3, as a single process would.
- Prometheus: the parent creates a fresh ``PROMETHEUS_MULTIPROC_DIR`` for the workers (unless one is
  given), so each worker's ``/metrics`` shows the sum over all of them (``shared.metrics_export``).

Spawned, not forked: a worker starts from a clean interpreter (no event loop, engine or thread of
the parent), and reads the multiprocess directory before prometheus_client is imported.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any

from uvicorn.config import STARTUP_FAILURE

log = logging.getLogger(__name__)

WORKER_ENV = "SERVICE_WORKER"  # the worker's number (1..N), set in each worker's environment
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_BACKOFF_S = (1, 2, 4, 8, 16, 30)
# A worker that ran this long before it died restarts its back-off from the beginning.
_STABLE_S = 60.0
# On top of the workers' own grace period, before the parent kills what still runs.
STOP_MARGIN_S = 5.0


def bind_socket(host: str, port: int) -> socket.socket:
    """The listening socket every worker serves (fails at once when the port is taken)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


@dataclass
class _Slot:
    number: int
    process: BaseProcess | None = None
    started_at: float = 0.0
    failures: int = 0
    restart_at: float | None = None
    lifeline: Any = field(default=None, repr=False)


class WorkerPool:
    """Spawns and tends the workers; ``run`` returns the parent's exit code."""

    def __init__(self, target: str, sock: socket.socket, workers: int, grace_s: float, options: dict[str, Any]) -> None:
        # ``module:function`` called in each worker as function(sock, options): imported there by name,
        # so nothing of the parent's ``__main__`` has to be pickled.
        self._target = target
        self._sock = sock
        self._grace_s = grace_s
        self._options = options
        self._ctx = multiprocessing.get_context("spawn")
        self._slots = [_Slot(number) for number in range(1, workers + 1)]
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._stopping = False

    def _request_stop(self, *_: object) -> None:
        self._stopping = True
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass

    def _spawn(self, slot: _Slot) -> None:
        reader, writer = self._ctx.Pipe(duplex=False)
        os.environ[WORKER_ENV] = str(slot.number)
        process = self._ctx.Process(
            target=_worker_main, args=(self._target, self._sock, self._options, reader),
            name=f"worker-{slot.number}",
        )
        process.start()
        reader.close()  # the worker holds the only reader: EOF there means this parent is gone
        slot.process, slot.lifeline, slot.started_at, slot.restart_at = process, writer, time.monotonic(), None
        log.info("worker started", extra={"worker": slot.number, "pid": process.pid})

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            for slot in self._slots:
                self._spawn(slot)
            code = self._tend()
            return self._stop_all(code)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _tend(self) -> int:
        """Wait for deaths and restarts until a stop is asked (0) or a worker cannot start (3)."""
        while not self._stopping:
            now = time.monotonic()
            due = [slot.restart_at for slot in self._slots if slot.restart_at is not None]
            timeout = max(0.0, min(due) - now) if due else None
            sentinels = [slot.process.sentinel for slot in self._slots if slot.restart_at is None and slot.process]
            multiprocessing.connection.wait([*sentinels, self._wake_r], timeout)
            if self._stopping:
                break
            now = time.monotonic()
            for slot in self._slots:
                if slot.restart_at is not None:
                    if now >= slot.restart_at:
                        self._spawn(slot)
                    continue
                assert slot.process is not None
                if slot.process.is_alive():
                    continue
                code = self._reap(slot)
                if code == STARTUP_FAILURE:
                    log.error("a worker failed to start; stopping the service", extra={"worker": slot.number})
                    return STARTUP_FAILURE
                slot.failures = 0 if now - slot.started_at >= _STABLE_S else slot.failures + 1
                delay = 0 if slot.failures == 0 else _BACKOFF_S[min(slot.failures, len(_BACKOFF_S)) - 1]
                log.warning("worker died; starting it again", extra={
                    "worker": slot.number, "exit_code": code, "restart_in_s": delay,
                })
                slot.restart_at = now + delay
        return 0

    def _reap(self, slot: _Slot) -> int:
        assert slot.process is not None
        slot.process.join()
        slot.lifeline.close()
        _mark_dead(slot.process.pid)
        return slot.process.exitcode if slot.process.exitcode is not None else 1

    def _stop_all(self, code: int) -> int:
        running = [slot for slot in self._slots if slot.restart_at is None and slot.process and slot.process.is_alive()]
        for slot in running:
            os.kill(slot.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self._grace_s + STOP_MARGIN_S
        for slot in running:
            slot.process.join(max(0.0, deadline - time.monotonic()))
            if slot.process.is_alive():
                log.error("worker did not stop in time; killed", extra={"worker": slot.number})
                slot.process.kill()
            worker_code = self._reap(slot)
            if worker_code != 0 and code == 0:
                code = worker_code
        return code


def _mark_dead(pid: int | None) -> None:
    if pid is not None and os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)


def _worker_main(target: str, sock: socket.socket, options: dict[str, Any], lifeline: Any) -> None:
    # Its own process group: the terminal's Ctrl-C reaches the parent only, which stops every worker once.
    os.setpgrp()
    threading.Thread(target=_stop_when_orphaned, args=(lifeline,), name="worker-lifeline", daemon=True).start()
    module, _, function = target.partition(":")
    serve: Callable[[socket.socket, dict[str, Any]], None] = getattr(importlib.import_module(module), function)
    serve(sock, options)


def _stop_when_orphaned(lifeline: Any) -> None:
    """Blocks until the parent's end of the pipe closes (it died, even by SIGKILL), then stops this
    worker gracefully."""
    try:
        lifeline.recv()
    except (EOFError, OSError):
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def serve_workers(
    target: str, *, host: str, port: int, workers: int, grace_s: float, options: dict[str, Any],
) -> int:
    """Bind ``host:port``, run ``workers`` processes of ``target`` on it; the exit code."""
    own_dir = None
    if not os.environ.get(MULTIPROC_ENV):
        own_dir = tempfile.mkdtemp(prefix="taskforce-metrics-")
        os.environ[MULTIPROC_ENV] = own_dir
    try:
        sock = bind_socket(host, port)
        try:
            return WorkerPool(target, sock, workers, grace_s, options).run()
        finally:
            sock.close()
    finally:
        if own_dir is not None:
            shutil.rmtree(own_dir, ignore_errors=True)


class WorkerHeaderMiddleware:
    """Under ``--workers N``: every answer says which worker gave it (``X-Worker: 1..N``), so an
    operator (and the tests) can see requests spread over the workers. The number, not the pid."""
    # Its send wrapper acts on http.response.start only: streamed bodies may skip it (shared.fastpath.direct_body).
    START_ONLY = True

    def __init__(self, app: Any, worker: str) -> None:
        self.app = app
        self._header = (b"x-worker", worker.encode())

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self._header]}
            await send(message)

        await self.app(scope, receive, send_with_header)


def mark_worker(app: Any) -> None:
    """Add ``WorkerHeaderMiddleware`` to ``app`` when this process is a worker of a pool."""
    worker = os.environ.get(WORKER_ENV)
    if worker:
        app.add_middleware(WorkerHeaderMiddleware, worker=worker)
