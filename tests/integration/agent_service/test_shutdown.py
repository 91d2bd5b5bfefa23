"""SIGTERM on a real ``python -m agent_service`` process with an SSE stream open (docs/operations.md,
"Agent Service restarts").

The stream ends cleanly at once (it does not hold the stop up for the grace period), the process
exits 0, the run under way is handed over (its events written, its lease given up, not ended), and the
SDK, resuming with ``Last-Event-ID`` once the service is back, gets every event exactly once, with no
hole: the restarted process continues the run (RUN_RESUMED) to its COMPLETE.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from conversation_service.agent_client import AgentServiceClient
from conversation_service.agent_client.config import AgentClientConfig
from shared.protocol import EventType, ExecuteRequest, UserContext
from tests.support.run_text import run_text
from tests.support.servers import ServiceProcess, free_port

API_KEY = "shutdown-key"
GRACE_S = 30.0
# The stop itself: end the streams, interrupt the run, close the database; not the grace period.
STOP_WITHIN_S = 4.0


def agent_process(database_url: str, port: int) -> ServiceProcess:
    return ServiceProcess("agent_service", {
        "AGENT_SERVICE_DATABASE_URL": database_url, "AGENT_SERVICE_API_KEYS": API_KEY,
        "AGENT_SERVICE_MIGRATE_ON_START": "true", "AGENT_SERVICE_SHUTDOWN_GRACE_S": str(GRACE_S),
        "LLM_PROVIDER": "builtin", "LLM_BUILTIN_FIRST_TOKEN_MS": "0",
        # A word every half second: the run is still answering when SIGTERM comes.
        "LLM_BUILTIN_CHUNK_DELAY_MS": "500",
    }, port=port)


async def test_sigterm_ends_open_streams_at_once_exits_0_and_the_sdk_resumes_after_the_restart(
    database_url: str, tmp_path: Path,
) -> None:
    port = free_port()
    first = agent_process(database_url, port)
    await first.start(tmp_path)
    second = agent_process(database_url, port)
    # Enough reconnects, a second or so apart, to span the restart.
    config = AgentClientConfig(reconnect_delays=(0.5,) + (1.0,) * 15, read_timeout=10.0)
    try:
        async with AgentServiceClient(first.url, API_KEY, config=config) as client:
            request = ExecuteRequest(message="tell me about the weather", user_context=UserContext(user_id="u-1"))
            async with client.execute_agent(request) as stream:
                events = [await anext(stream)]
                assert first.proc is not None
                first.proc.terminate()
                stopped_at = time.monotonic()

                async def read_rest() -> None:
                    async for event in stream:
                        events.append(event)

                reader = asyncio.create_task(read_rest())
                code = await first.wait_exit(STOP_WITHIN_S)
                assert code == 0, (
                    f"exit {code} {time.monotonic() - stopped_at:.1f} s after SIGTERM:\n{first.logs()[-3000:]}"
                )
                await second.start(tmp_path)
                async with asyncio.timeout(30):
                    await reader
        assert stream.reconnects >= 1, "the stream never broke: the run ended before SIGTERM"
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        last = events[-1]
        assert last.type is EventType.COMPLETE, last
        assert [e.type for e in events].count(EventType.RUN_RESUMED) == 1
        assert run_text(events, last.run_id) == last.data["answer"]
    finally:
        await first.stop(kill=True)
        await second.stop()
