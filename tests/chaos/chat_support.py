"""What the ConversationService chaos tests share: the services as real processes on loopback, a
chat client that records every frame it gets and resumes with ``after_seq``, and the checks of
the crash-safety invariants (docs/architecture.md, "Crash safety: turns and frame seqs")."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import websockets

from conversation_service.auth.tokens import issue_token
from shared.protocol import EventEnvelope
from shared.sse import SSEDecoder, decode_envelope
from tests.support.servers import ServiceProcess

SECRET = "chaos-secret-for-the-conversation-service-0123456789"
AGENT_KEY = "chaos-agent-key-0123456789"
AGENT_QUESTION = "/agent what is 17*23"
LEASE_S = 3.0
SWEEP_S = 0.5
# Pace of the built-in model: slow enough that a kill lands mid-reply.
PACE = {"LLM_PROVIDER": "builtin", "LLM_BUILTIN_FIRST_TOKEN_MS": "200", "LLM_BUILTIN_CHUNK_DELAY_MS": "60"}


def headers(user: str = "alice") -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(SECRET, user, 'acme', ttl_s=3600)}"}


def agent_process(database_url: str, tmp_path: Path, **extra: str) -> ServiceProcess:
    (tmp_path / "no-docs").mkdir(exist_ok=True)
    return ServiceProcess("agent_service", {
        **PACE, "AGENT_SERVICE_DATABASE_URL": database_url, "AGENT_SERVICE_API_KEYS": AGENT_KEY,
        "AGENT_SERVICE_MIGRATE_ON_START": "true", "AGENT_SERVICE_KNOWLEDGE_DIR": str(tmp_path / "no-docs"), **extra,
    })


def chat_process(database_url: str, agent_url: str, port: int | None = None, **extra: str) -> ServiceProcess:
    return ServiceProcess("conversation_service", {
        **PACE, "CONVERSATION_DATABASE_URL": database_url, "AGENT_SERVICE_URL": agent_url,
        "AGENT_SERVICE_API_KEY": AGENT_KEY, "AUTH_JWT_SECRET": SECRET, "TURN_LEASE_S": str(LEASE_S),
        "TURN_SWEEP_INTERVAL_S": str(SWEEP_S), "AGENT_RECONNECT_DELAYS_S": "0.2,0.5,1", **extra,
    }, port=port)


async def new_conversation(base: str) -> str:
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(f"{base}/conversations", json={"title": "chaos"}, headers=headers())
        assert r.status_code == 201, r.text
        return r.json()["id"]


async def send(base: str, cid: str, content: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(f"{base}/conversations/{cid}/messages", json={"content": content}, headers=headers())
        assert r.status_code == 202, r.text
        return r.json()


async def stored_messages(base: str, cid: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.get(f"{base}/conversations/{cid}/messages", headers=headers())
        assert r.status_code == 200, r.text
        body = r.json()
        return body["items"] if isinstance(body, dict) else body


async def agent_session_of(base: str, cid: str) -> str:
    """The Agent Service session the conversation's agent turns run in."""
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.get(f"{base}/conversations/{cid}/agent-session", headers=headers())
        assert r.status_code == 200, r.text
        session_id = r.json()["agent_session_id"]
        assert session_id, r.json()
        return session_id


async def replay_agent_log(agent_url: str, session_id: str, api_key: str) -> list[EventEnvelope]:
    """Every event of the session's durable log, read with ``Last-Event-ID: 0`` up to its terminal event."""
    decoder, events = SSEDecoder(), []
    headers_ = {"X-API-Key": api_key, "Last-Event-ID": "0"}
    url = f"{agent_url}/api/v1/agent/sessions/{session_id}/events"
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as http, http.stream("GET", url, headers=headers_) as resp:
        assert resp.status_code == 200, await resp.aread()
        async for chunk in resp.aiter_bytes():
            for sse in decoder.feed(chunk):
                events.append(decode_envelope(sse))
                if events[-1].is_terminal:
                    return events
    return events


@dataclass
class ChatClient:
    """One WebSocket client of a conversation: every frame it received, in order, across resumes."""

    cid: str
    frames: list[dict[str, Any]] = field(default_factory=list)
    resumed_at: list[int] = field(default_factory=list)  # the after_seq of each resume
    _ws: Any = None
    _reader: asyncio.Task | None = None
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def last_seq(self) -> int:
        return max((f["seq"] for f in self.frames), default=0)

    async def connect(self, base: str, *, resume: bool = False) -> None:
        url = base.replace("http://", "ws://") + f"/conversations/{self.cid}/ws"
        if resume:
            self.resumed_at.append(self.last_seq)
            url += f"?after_seq={self.last_seq}"
        self._ws = await websockets.connect(url, additional_headers=headers())
        self._reader = asyncio.create_task(self._read(self._ws))

    async def _read(self, ws) -> None:
        try:
            async for raw in ws:
                frame = json.loads(raw)
                if "seq" in frame:
                    self.frames.append(frame)
                    self._arrived.set()
        except websockets.ConnectionClosed:
            pass

    async def wait_for(self, predicate, timeout: float) -> dict[str, Any]:
        """The first frame received (so far or from now on) that matches ``predicate``."""
        deadline = time.monotonic() + timeout
        while True:
            self._arrived.clear()
            found = next((f for f in self.frames if predicate(f)), None)
            if found is not None:
                return found
            try:
                await asyncio.wait_for(self._arrived.wait(), max(deadline - time.monotonic(), 0))
            except TimeoutError:
                raise TimeoutError(
                    f"no such frame within {timeout} s; got {[f['type'] for f in self.frames]}") from None

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)


def reply_id(frames: list[dict[str, Any]], user_message_id: str) -> str | None:
    """The assistant message answering ``user_message_id`` (the last one, after a restart)."""
    ids = [f["data"]["id"] for f in frames if f["type"] == "message.created" and f["data"].get("role") == "assistant"
           and (f["data"].get("agent_metadata") or {}).get("in_reply_to") == user_message_id]
    return ids[-1] if ids else None


def is_end_of(frame: dict[str, Any], message_id: str | None) -> bool:
    return (frame["type"] in ("message.completed", "message.error")
            and message_id is not None and frame["data"].get("message_id") == message_id)


def shown_text(frames: list[dict[str, Any]], message_id: str) -> str:
    """The text a client shows for a message from its deltas: a delta with an ``offset`` replaces
    from there (a chunk sent again after a takeover does not repeat), as the WebSocket contract says."""
    text = ""
    for f in frames:
        if f["type"] == "message.delta" and f["data"].get("message_id") == message_id:
            offset = f["data"].get("offset", len(text))
            text = text[:offset] + f["data"]["text"]
    return text


def assert_seqs_are_forever(*streams: list[dict[str, Any]]) -> None:
    """Every seq names one frame for good: whoever got seq N (live, resumed, replayed) got the same frame."""
    by_seq: dict[int, tuple[str, Any]] = {}
    for stream in streams:
        for f in stream:
            seen = by_seq.setdefault(f["seq"], (f["type"], f["data"]))
            assert seen == (f["type"], f["data"]), f"seq {f['seq']} reused: {seen} then {(f['type'], f['data'])}"


def assert_once_in_order(frames: list[dict[str, Any]]) -> None:
    seqs = [f["seq"] for f in frames]
    assert seqs == sorted(set(seqs)), f"frames repeated or out of order: {seqs}"


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered), 2), "p95": round(p95, 2), "max": round(ordered[-1], 2)}


def record(path: Path, name: str, figures: dict[str, Any]) -> None:
    """Figures of a run, printed (``pytest -s``) and kept next to the test's logs."""
    line = json.dumps({"test": name, **figures})
    print(line)
    with open(path / "chaos-figures.jsonl", "a") as out:
        out.write(line + "\n")
