"""SSE bytes and a recording sleep for the agent client tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conversation_service.agent_client import AgentClientConfig
from shared.protocol import EventEnvelope, EventType, utcnow
from shared.sse import encode_envelope

BASE_URL = "http://agent.test"
API_KEY = "k-secret-0123456789"
SESSION_ID = "sess-1"

# Tiny but distinct delays: a test can tell them apart in the recorded schedule.
# No resume budget beyond the delays: the sleeps are recorded, not slept, so no time would pass.
FAST = AgentClientConfig(retry_delays=(0.001, 0.002, 0.004), reconnect_delays=(0.001, 0.002, 0.004), resume_budget=0)

_PAYLOADS: dict[EventType, dict[str, Any]] = {
    EventType.THOUGHT: {"text": "thinking"},
    EventType.ANSWER_CHUNK: {"text": "chunk"},
    EventType.COMPLETE: {"answer": "done"},
    EventType.ERROR: {"code": "INTERNAL", "message": "boom"},
    EventType.ASK_USER: {"question_id": "q1", "question": "which?", "expires_at": "2030-01-01T00:00:00Z"},
}


def sse_event(seq: int, type: EventType = EventType.ANSWER_CHUNK, data: dict | None = None, session_id: str = SESSION_ID) -> bytes:
    envelope = EventEnvelope(
        session_id=session_id,
        run_id="run-1",
        seq=seq,
        type=type,
        ts=utcnow(),
        data=data if data is not None else dict(_PAYLOADS[type]),
    )
    return encode_envelope(envelope)


def sse_events(first: int, last: int, *, terminal: EventType | None = None) -> bytes:
    """Events first..last as ANSWER_CHUNK, the last one of type ``terminal`` when given."""
    out = b""
    for seq in range(first, last + 1):
        out += sse_event(seq, terminal if terminal is not None and seq == last else EventType.ANSWER_CHUNK)
    return out


@dataclass
class RecordingSleep:
    """Stands in for asyncio.sleep: records the backoff schedule and returns at once."""

    delays: list[float] = field(default_factory=list)

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
