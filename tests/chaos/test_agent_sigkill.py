"""SIGKILL the Agent Service at random points of 10 agent turns of a chat, and restart it.

The Agent Service is a real process on loopback (built-in model, 40 ms per chunk, 100 ms group
commits, 16-seq reservations, 1 s leases); the ConversationService is the real app, delegating to it.
For each turn, at a point drawn from a seeded RNG while a reader of the Agent Service's own SSE
stream is following the run live, the process is killed and started again on the same port. Then:

- the turn ends, in the chat, with the full answer: the restarted process continues the run from its
  last checkpoint (``test_durable_runs`` kills one run at every kind of point);
- the message the chat stored is exactly what its deltas show, each applied at its offset (a run
  continued after the kill cuts the text of the step that was cut);
- the reader, resuming with ``Last-Event-ID`` against the restarted process, reaches the run's COMPLETE,
  and the text it folds from the chunks (dropping the cut step's, as RUN_RESUMED says) is the answer;
- reading the Agent Service's log directly, no seq the reader saw is stored as a different event.

Figures (tries, how many held, time from the kill to the terminal event) are printed and recorded as
test properties. Time bound: about 30 s per backend; each test is capped at 150 s.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from agent_service.models import AgentEvent, AgentSession
from conversation_service.db.models import Message
from shared.db import create_engine
from shared.protocol import EventEnvelope, SessionStatus
from shared.sse import SSEDecoder, decode_envelope
from shared.transactions import transaction
from tests.chaos.chat_support import shown_text
from tests.integration.conversation_service.support import connect
from tests.integration.delegation.stack import AGENT_KEY, chat_service
from tests.support.run_text import run_text
from tests.support.servers import ServiceProcess, free_port

TURNS = 10
SEED = 7766
MESSAGE = "/agent hello there, who are you?"
# How long after the reader saw the run's first event the process is killed: most kills land
# mid-answer (about 25 chunks of 40 ms), a few after the run ended.
KILL_AFTER_S = (0.0, 1.1)
# Restarting the process takes 2-9 s on a loaded machine; the lease (1 s) has expired by then.
TERMINAL_WITHIN_S = 25.0
AGENT_ENV = {
    "AGENT_SERVICE_API_KEYS": AGENT_KEY,
    "AGENT_SERVICE_MIGRATE_ON_START": "true",
    "AGENT_SERVICE_LEASE_SECONDS": "1.0",
    "AGENT_SERVICE_LEASE_RENEW_SECONDS": "0.25",
    "AGENT_SERVICE_REPLAY_POLL_SECONDS": "0.05",
    "AGENT_SERVICE_GROUP_COMMIT_MS": "100",
    "AGENT_SERVICE_SEQ_RESERVE_BLOCK": "16",
    "LLM_PROVIDER": "builtin",
    "LLM_BUILTIN_FIRST_TOKEN_MS": "0",
    "LLM_BUILTIN_CHUNK_DELAY_MS": "40",
}
# The chat keeps resuming its stream while the Agent Service restarts (about 10 s in all).
DELEGATION = {"agent_retry_delays_s": "0.2,0.5,1", "agent_reconnect_delays_s": "0.2,0.5,1,1,2,2,2"}
HEADERS = {"X-API-Key": AGENT_KEY}

Seen = tuple[str, str, dict]  # run_id, type, data


@dataclass
class Figures:
    tries: int = 0
    killed_mid_run: int = 0
    held: int = 0
    seqs_skipped: int = 0
    to_terminal_s: list[float] = field(default_factory=list)

    def summary(self) -> str:
        times = sorted(self.to_terminal_s) or [0.0]
        return (
            f"tries={self.tries} killed_mid_run={self.killed_mid_run} held={self.held} "
            f"seqs_skipped={self.seqs_skipped} kill_to_terminal_s: median={times[len(times) // 2]:.2f} "
            f"max={times[-1]:.2f}"
        )


class AgentProcess:
    """The Agent Service as a child process, always on the same port (the chat's configured URL)."""

    def __init__(self, database_url: str, log_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._env = {**AGENT_ENV, "AGENT_SERVICE_DATABASE_URL": database_url}
        self._log_dir = log_dir
        self.process: ServiceProcess | None = None

    async def start(self) -> None:
        self.process = ServiceProcess("agent_service", self._env, port=self.port)
        await self.process.start(self._log_dir)

    async def kill_and_restart(self) -> None:
        assert self.process is not None
        await self.process.stop(kill=True)
        await self.start()

    async def stop(self) -> None:
        if self.process is not None:
            await self.process.stop()


class SessionReader:
    """A live reader of one agent session, straight from the Agent Service: it records every event it
    is shown and, when the connection breaks, resumes with ``Last-Event-ID``."""

    def __init__(self, url: str, session_id: str, after: int) -> None:
        self._url = f"{url}/api/v1/agent/sessions/{session_id}/events"
        self.last = after
        self.seen: dict[int, Seen] = {}
        self.first_event = asyncio.Event()
        self.terminal: EventEnvelope | None = None
        self.duplicates = 0
        self.deadline: float | None = None

    async def until_terminal(self) -> EventEnvelope | None:
        """Follow the session until a terminal event; None when ``deadline`` (set at the kill) passed."""
        async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=3.0)) as http:
            while self.deadline is None or time.monotonic() < self.deadline:
                try:
                    await self._read(http)
                except httpx.HTTPError:
                    pass  # the process died or is starting: resume from the last seq seen
                if self.terminal is not None:
                    return self.terminal
                await asyncio.sleep(0.05)
        return None

    async def _read(self, http: httpx.AsyncClient) -> None:
        decoder = SSEDecoder()
        headers = {**HEADERS, "Last-Event-ID": str(self.last)}
        async with http.stream("GET", self._url, headers=headers) as resp:
            resp.raise_for_status()
            async for chunk in resp.aiter_bytes():
                for sse in decoder.feed(chunk):
                    if self._take(decode_envelope(sse)):
                        return

    def events_of(self, run_id: str) -> list[EventEnvelope]:
        """The events of ``run_id`` the reader saw, in seq order."""
        return [EventEnvelope(session_id="", run_id=r, seq=seq, type=t, ts=datetime.now(UTC), data=d)
                for seq, (r, t, d) in sorted(self.seen.items()) if r == run_id]

    def _take(self, env: EventEnvelope) -> bool:
        if env.seq <= self.last:
            self.duplicates += 1
            return False
        self.seen[env.seq] = (env.run_id, env.type.value, env.data)
        self.last = env.seq
        self.first_event.set()
        if env.is_terminal:
            self.terminal = env
        return env.is_terminal


async def _active_session(engine: AsyncEngine) -> str:
    """The agent session the chat's turn is running (it is claimed before the first event)."""
    async with asyncio.timeout(15):
        while True:
            async with engine.connect() as conn:
                row = (await conn.execute(
                    select(AgentSession.id).where(AgentSession.status == SessionStatus.ACTIVE.value)
                )).first()
            if row is not None:
                return row[0]
            await asyncio.sleep(0.02)


async def _stored_events(engine: AsyncEngine) -> dict[tuple[str, int], Seen]:
    async with engine.connect() as conn:
        rows = (await conn.execute(
            select(AgentEvent.session_id, AgentEvent.seq, AgentEvent.run_id, AgentEvent.type, AgentEvent.data)
        )).all()
    return {(sid, seq): (run_id, type_, data) for sid, seq, run_id, type_, data in rows}


async def _stored_message(stack, message_id: str) -> Message:
    async with transaction(stack.state.storage.sessionmaker) as session:
        message = await session.get(Message, message_id)
        assert message is not None
        return message


def _ends_turn(user_message_id: str):
    """The end of the assistant's message answering ``user_message_id`` (the only other message)."""
    def ends(frame: dict) -> bool:
        return frame["type"] in ("message.completed", "message.error") \
            and frame["data"].get("message_id") != user_message_id
    return ends


async def _turn(
    stack, agent: AgentProcess, engine: AsyncEngine, rng: random.Random, readers: dict[str, SessionReader],
    figures: Figures,
) -> list[str]:
    """One agent turn with a kill at a random point; returns what did not hold (empty: all held)."""
    failures: list[str] = []
    cid = await stack.conversation()
    async with await connect(stack.chat_url, cid, "alice") as ws:
        sent = await stack.send(cid, MESSAGE)
        assert sent.status_code == 202 and sent.json()["route"]["target"] == "agent", sent.text
        message_id = sent.json()["message_id"]
        session_id = await _active_session(engine)
        reader = readers.setdefault(session_id, SessionReader(agent.url, session_id, 0))
        reader.terminal, reader.deadline = None, None
        reader.first_event.clear()
        following = asyncio.create_task(reader.until_terminal())
        await asyncio.wait_for(reader.first_event.wait(), 15)
        await asyncio.sleep(rng.uniform(*KILL_AFTER_S))
        if reader.terminal is None:
            figures.killed_mid_run += 1
        killed_at = time.monotonic()
        reader.deadline = killed_at + TERMINAL_WITHIN_S
        await agent.kill_and_restart()
        terminal = await following
        if terminal is None:
            failures.append(f"the reader resuming after seq {reader.last} never got a terminal event")
        else:
            figures.to_terminal_s.append(max(0.0, time.monotonic() - killed_at))
        frames = await _frames_until(ws, _ends_turn(message_id))
    if not frames or not _ends_turn(message_id)(frames[-1]):
        return [*failures, "the chat turn did not end"]
    end = frames[-1]
    reply_id = end["data"]["message_id"]
    shown = shown_text(frames, reply_id)
    stored = await _stored_message(stack, reply_id)
    if stored.content != shown:
        failures.append(f"stored message {stored.content!r} differs from the deltas shown {shown!r}")
    completed = end["type"] == "message.completed" and terminal is not None and terminal.type.value == "COMPLETE"
    if not completed:
        failures.append(f"the turn did not complete: {end['type']}, agent terminal {terminal and terminal.data}")
    elif stored.content != terminal.data["answer"]:
        failures.append("the completed message is not the full answer")
    elif run_text(reader.events_of(terminal.run_id), terminal.run_id) != terminal.data["answer"]:
        failures.append("the reader's text is not the answer, each passage once")
    return failures


async def _frames_until(ws, predicate, timeout: float = 40.0) -> list[dict]:
    frames: list[dict] = []
    try:
        async with asyncio.timeout(timeout):
            while True:
                frame = json.loads(await ws.recv())
                frames.append(frame)
                if predicate(frame):
                    return frames
    except TimeoutError:
        return frames


def _reused(readers: dict[str, SessionReader], stored: dict[tuple[str, int], Seen]) -> list[str]:
    """Seqs a reader saw live that the log now holds as another event."""
    reused = []
    for session_id, reader in readers.items():
        for seq, event in reader.seen.items():
            row = stored.get((session_id, seq))
            if row is not None and row != event:
                reused.append(f"{session_id[:8]} seq {seq}: shown as {event[1]}, stored as {row[1]}")
    return reused


@pytest.mark.timeout(150)
async def test_sigkill_mid_turn_keeps_seqs_and_reaches_an_end(database_factory, tmp_path: Path, record_property) -> None:
    agent_db, chat_db = await database_factory("chaos_agent"), await database_factory("chaos_chat")
    agent = AgentProcess(agent_db, tmp_path)
    rng = random.Random(SEED)
    figures = Figures()
    failures: list[str] = []
    readers: dict[str, SessionReader] = {}
    engine = create_engine(agent_db)
    await agent.start()
    try:
        async with chat_service(chat_db, agent.url, delegation=DELEGATION) as stack:
            for turn in range(TURNS):
                figures.tries += 1
                problems = await _turn(stack, agent, engine, rng, readers, figures)
                figures.held += not problems
                failures += [f"turn {turn}: {problem}" for problem in problems]
                if problems:
                    break  # the first broken turn is the report; the rest would only repeat it
            await stack.state.tasks.join()
        failures += _reused(readers, await _stored_events(engine))
        for reader in readers.values():
            seqs = sorted(reader.seen)
            figures.seqs_skipped += sum(b - a - 1 for a, b in itertools.pairwise(seqs))
    finally:
        await agent.stop()
        await engine.dispose()
    print(f"\nAgent Service SIGKILL chaos: {figures.summary()}")
    record_property("figures", figures.summary())
    assert not failures, "\n".join(failures) + "\n" + figures.summary()
    assert figures.killed_mid_run >= TURNS // 2  # the kills really hit running turns
