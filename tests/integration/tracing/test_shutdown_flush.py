"""SIGTERM stays fast with the trace backend down: the spans still queued get one short try
(``FLUSH_ON_SHUTDOWN_S``), not the exporter's retries. Before, the last flush waited through them, and a
chat replica took 7.3-7.7 s to stop instead of 0.3-0.4 s, most of its drain's grace.

Two ways a backend is down: nothing listens (each try is refused at once, and the exporter backs off
1 s, 2 s, 4 s between them), and something listens that never answers (a try waits for its timeout).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from conversation_service.auth.tokens import issue_token
from shared.tracing.core import FLUSH_ON_SHUTDOWN_S
from tests.support.servers import ServiceProcess, free_port

SECRET = "flush-secret-for-the-conversation-service-0123456789"
# What a stop costs here without tracing (0.3-0.4 s) and the flush's bound, with room for a loaded machine.
STOP_WITHIN_S = FLUSH_ON_SHUTDOWN_S + 2.0


@contextmanager
def dead_backend(kind: str) -> Iterator[str]:
    """The URL of a trace backend that refuses every connection, or accepts them and never answers."""
    if kind == "refusing":
        yield f"http://127.0.0.1:{free_port()}"
        return
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)  # connections complete in the backlog; nothing is ever read or answered
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.parametrize("kind", ["refusing", "silent"])
async def test_sigterm_does_not_wait_for_a_dead_trace_backend(kind: str, tmp_path: Path) -> None:
    with dead_backend(kind) as endpoint:
        chat = ServiceProcess("conversation_service", {
            "CONVERSATION_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/chat.db", "AUTH_JWT_SECRET": SECRET,
            "AGENT_SERVICE_URL": f"http://127.0.0.1:{free_port()}", "AGENT_SERVICE_API_KEY": "unused-key-0123456789",
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SDK_DISABLED": "false",
            # Spans wait in the queue for the shutdown's flush (the periodic export would try first otherwise).
            "OTEL_BSP_SCHEDULE_DELAY": "60000",
        })
        await chat.start(tmp_path)
        try:
            headers = {"Authorization": f"Bearer {issue_token(SECRET, 'alice', 'acme', ttl_s=600)}"}
            async with httpx.AsyncClient(base_url=chat.url, headers=headers, timeout=10) as http:
                for n in range(5):  # traced requests: their spans are what is left to flush
                    assert (await http.post("/conversations", json={"title": f"t{n}"})).status_code == 201
            started = time.monotonic()
            chat.proc.terminate()
            code = await chat.wait_exit(timeout=15)
            took = time.monotonic() - started
        finally:
            await chat.stop(kill=True)
    assert code == 0, chat.logs()[-3000:]
    assert took < STOP_WITHIN_S, f"SIGTERM took {took:.1f} s with a {kind} trace backend"
