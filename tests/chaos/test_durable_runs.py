"""A crash costs a step, never the run: the Agent Service is SIGKILLed at every kind of point of one
multi-step run, and the run completes, each passage of its answer once, for every client.

Real processes: the Agent Service (``tests.chaos.durable_agent``: the product's app with a scripted,
paced model and two counting test tools) behind a TCP relay, and the real ConversationService
(in this process) delegating a chat's ``/agent`` message to it. On SQLite one process, restarted on
the same file after each kill; on PostgreSQL two replicas, the one that owns the run is killed and
the other takes it over (the killed one is started again meanwhile). The kills, in one run, each at
a point the test waits for (no random rounds):

1. while the model streams its first step's text;
2. inside the idempotent tool (``lookup``), once its TOOL_START is durable;
3. between two steps (after the lookup's result, while the model has not answered yet);
4. inside the non-idempotent tool (``send_note``), which the run made only once its TOOL_START was durable;
5. while the model streams the final answer;
6. during the terminal write (held open by the launcher while a file says so).

Then: the run ends COMPLETE, continued six times (``AGENT_SERVICE_MAX_CONTINUATIONS=6`` here); the
non-idempotent tool ran once and was not made again (the model was told its outcome is unknown, and
says so), the idempotent one ran again; a reader that followed the run with ``Last-Event-ID`` across
the kills, a replay from 0, an A2A ``SubscribeToTask`` subscriber resuming the same way, the chat's
WebSocket client and the chat's stored reply all show the same final text, which is the run's whole
answer with each passage once; one reply, no error, no dead letter; no seq a client saw names another
event in the log. And a run whose process dies three times (the default budget of two continuations)
ends ERROR INTERRUPTED, as every run did before durable runs.

Bounded: about 30-40 s per backend for the six kills, 15 s for the three.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from agent_service.migrate import run_migrations
from agent_service.models import AgentRun, AgentSession
from agent_service.runs.continuation import UNKNOWN_OUTCOME
from conversation_service.db.models import DeadLetter, Message
from shared.db import create_engine
from shared.protocol import EventEnvelope, EventType, SessionStatus
from shared.sse import SSEDecoder, decode_envelope
from shared.transactions import transaction
from tests.chaos import durable_agent
from tests.chaos.chat_support import replay_agent_log, shown_text
from tests.chaos.test_agent_sigkill import SessionReader, _reused, _stored_events
from tests.integration.conversation_service.support import connect
from tests.integration.delegation.stack import AGENT_KEY, chat_service
from tests.support.run_text import run_text, run_text_by_seq
from tests.support.servers import ServiceProcess, free_port

MESSAGE = "/agent look the value up and send the note"
WAIT_S = 40.0
AGENT_ENV = {
    "AGENT_SERVICE_API_KEYS": AGENT_KEY,
    "AGENT_SERVICE_MIGRATE_ON_START": "false",  # migrated once by the test: two replicas would race
    "AGENT_SERVICE_LEASE_SECONDS": "1.0",
    "AGENT_SERVICE_LEASE_RENEW_SECONDS": "0.25",
    "AGENT_SERVICE_REPLAY_POLL_SECONDS": "0.05",
    "AGENT_SERVICE_GROUP_COMMIT_MS": "50",
    "AGENT_SERVICE_SEQ_RESERVE_BLOCK": "16",
    "AGENT_SERVICE_MEMORY_ENABLED": "false",
    "CHUNK_S": "0.05", "BETWEEN_S": "1.0", "TOOL_S": "1.5",
}
# The chat keeps resuming its stream while the Agent Service restarts.
DELEGATION = {"agent_retry_delays_s": "0.2,0.5,1", "agent_reconnect_delays_s": "0.2,0.5,1,1,1,1,1,1,1,1"}
A2A_HEADERS = {"X-API-Key": AGENT_KEY, "A2A-Version": "1.0"}


class FailoverRelay:
    """The one address clients use for the Agent Service: each connection goes to the first replica
    that accepts it, as a load balancer with health checks would send it."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self._server: asyncio.AbstractServer | None = None
        self.url = ""

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for port in self.ports:
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                continue
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            return
        writer.transport.abort()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.transport.abort()


class Replicas:
    """The Agent Service processes; ``kill_owner`` kills the one executing the run and starts it again
    (on SQLite at once, before anything else goes on; on PostgreSQL in the background, while the other
    replica takes the run over)."""

    def __init__(self, env: dict[str, str], count: int, log_dir: Path) -> None:
        self.processes = [ServiceProcess("tests.chaos.durable_agent", env, port=free_port()) for _ in range(count)]
        self.relay = FailoverRelay([p.port for p in self.processes])
        self._log_dir = log_dir
        self._restarting: list[asyncio.Task[None]] = []
        self.kills: list[str] = []

    async def start(self) -> None:
        await asyncio.gather(*(p.start(self._log_dir) for p in self.processes))
        await self.relay.start()

    async def kill_owner(
        self, engine: AsyncEngine, run_id: str, point: str, before_restart: Callable[[], object] | None = None,
    ) -> None:
        await asyncio.gather(*self._restarting)  # every replica is up: one is there to take over
        self._restarting.clear()
        async with engine.connect() as conn:
            owner = (await conn.execute(select(AgentRun.owner_id).where(AgentRun.id == run_id))).scalar_one()
        pid = int(owner.rsplit("-", 2)[-2])  # new_owner_id: host-pid-random
        [process] = [p for p in self.processes if p.proc is not None and p.proc.pid == pid]
        os.kill(pid, signal.SIGKILL)
        await process.wait_exit(10)
        self.kills.append(point)
        if before_restart is not None:
            before_restart()
        restart = asyncio.create_task(process.start(self._log_dir))
        if len(self.processes) == 1:
            await restart
        else:
            self._restarting.append(restart)

    async def stop(self) -> None:
        await asyncio.gather(*self._restarting, return_exceptions=True)
        await self.relay.close()
        await asyncio.gather(*(p.stop() for p in self.processes))


class TaskFollower:
    """An A2A client following the run's task (``SubscribeToTask``, HTTP+JSON binding): the answer
    artifact's text as it folds the updates (``append`` true adds, false replaces), resuming a cut
    stream with ``Last-Event-ID`` (the seq extension)."""

    def __init__(self, url: str, task_id: str) -> None:
        self._url = f"{url}/a2a/v1/tasks/{task_id}:subscribe"
        self.text = ""
        self.last: int | None = None
        self.state: str | None = None
        self.replaced = 0

    async def follow(self, deadline: float) -> None:
        async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=3.0)) as http:
            while self.state != "TASK_STATE_COMPLETED" and time.monotonic() < deadline:
                headers = A2A_HEADERS if self.last is None else {**A2A_HEADERS, "Last-Event-ID": str(self.last)}
                try:
                    async with http.stream("POST", self._url, headers=headers, json={}) as resp:
                        if resp.status_code == 200:
                            await self._read(resp)
                except httpx.HTTPError:
                    pass  # the replica died or is starting: resume from the last seq seen
                await asyncio.sleep(0.05)

    async def _read(self, resp: httpx.Response) -> None:
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            update = json.loads(line[5:])
            kind, body = next(iter(update.items()))
            if kind == "task":
                self.text = "".join(p.get("text", "") for a in body.get("artifacts", []) if a["name"] == "answer"
                                    for p in a["parts"])
                self.state = body["status"]["state"]
            elif kind == "artifactUpdate" and body["artifact"]["name"] == "answer":
                text = "".join(p.get("text", "") for p in body["artifact"]["parts"])
                self.replaced += not body["append"] and bool(self.text)
                self.text = self.text + text if body["append"] else text
            elif kind == "statusUpdate":
                self.state = body["status"]["state"]
            self.last = body["metadata"]["seq"]


async def _wait_until(check: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _calls(folder: Path, tool: str) -> int:
    path = folder / f"{tool}.calls"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _since_resume(reader: SessionReader, resumes: int) -> list[tuple[str, dict]] | None:
    """The (type, data) of the events the reader saw after the run's ``resumes``-th RUN_RESUMED (0: from
    its start); None while the reader has not seen that many (it is still catching up after a kill)."""
    events = [reader.seen[seq][1:] for seq in sorted(reader.seen)]
    starts = [i for i, (type_, _) in enumerate(events) if type_ == "RUN_RESUMED"]
    if len(starts) < resumes:
        return None
    return events[starts[resumes - 1] + 1:] if resumes else events


def _chunks_since_resume(reader: SessionReader, resumes: int, at_least: int, after: str | None = None):
    def check() -> bool:
        events = _since_resume(reader, resumes)
        if events is None:
            return False
        if after is not None:
            if after not in [t for t, _ in events]:
                return False
            events = events[[t for t, _ in events].index(after):]
        return sum(t == "ANSWER_CHUNK" for t, _ in events) >= at_least
    return check


def _saw_tool_end(reader: SessionReader, resumes: int, call_id: str) -> Callable[[], bool]:
    def check() -> bool:
        events = _since_resume(reader, resumes)
        return events is not None and any(t == "TOOL_END" and d.get("call_id") == call_id for t, d in events)
    return check


async def _run_of(engine: AsyncEngine) -> tuple[str, str]:
    async with asyncio.timeout(15):
        while True:
            async with engine.connect() as conn:
                row = (await conn.execute(select(AgentSession.id, AgentSession.current_run_id)
                                          .where(AgentSession.status == SessionStatus.ACTIVE.value))).first()
            if row is not None and row[1] is not None:
                return row[0], row[1]
            await asyncio.sleep(0.02)


async def _kill_at_every_kind_of_point(replicas: Replicas, engine: AsyncEngine, run_id: str, reader: SessionReader,
                                       folder: Path) -> None:
    async def kill_when(check: Callable[[], bool], point: str, then_s: float = 0.0,
                        before_restart: Callable[[], object] | None = None) -> None:
        await _wait_until(check, f"kill point {point!r}")
        await asyncio.sleep(then_s)  # a margin inside a step the test knows lasts longer (a tool, a model's pause)
        await replicas.kill_owner(engine, run_id, point, before_restart)

    await kill_when(_chunks_since_resume(reader, 0, 3), "the model streams")
    # The lookup takes 1.5 s: 0.5 s into it, its TOOL_START (and the step before) are committed.
    await kill_when(lambda: _calls(folder, "lookup") >= 1, "inside the idempotent tool", then_s=0.5)
    # The model's next step starts 1 s after the lookup's result: the kill lands in between.
    await kill_when(_saw_tool_end(reader, 2, "call-lookup"), "between steps", then_s=0.3)
    # The note was made only once its TOOL_START was durable: a kill right as it runs.
    await kill_when(lambda: _calls(folder, "send_note") >= 1, "inside the non-idempotent tool")
    # From here the next terminal write waits (the answer under way is cut long before its end).
    hold = folder / "hold-terminal"
    hold.write_text("hold")
    await kill_when(_chunks_since_resume(reader, 4, 5, after="TOOL_END"), "the model streams the answer")
    await kill_when(lambda: (folder / "terminal-held").exists(), "during the terminal write",
                    before_restart=hold.unlink)


async def _chat_reply(stack, message_id: str, frames: list[dict]) -> Message:
    async with transaction(stack.state.storage.sessionmaker) as session:
        replies = (await session.execute(select(Message).where(Message.role == "assistant"))).scalars().all()
        assert len(replies) == 1, [(m.id, m.status, m.content[:40]) for m in replies]  # the same reply, no second
        dead = await session.scalar(select(func.count()).select_from(DeadLetter))
    assert dead == 0, "no dead letter"
    assert replies[0].agent_metadata["in_reply_to"] == message_id
    return replies[0]


@pytest.mark.timeout(240)
async def test_a_run_killed_at_every_kind_of_point_completes_with_each_passage_once(
    database_factory, tmp_path: Path, record_property,
) -> None:
    agent_db, chat_db = await database_factory("durable_agent"), await database_factory("durable_chat")
    postgres = agent_db.startswith("postgresql")
    folder = tmp_path / "chaos"
    folder.mkdir()
    (folder / "profiles.yaml").write_text(durable_agent.PROFILES)
    env = {**AGENT_ENV, "AGENT_SERVICE_DATABASE_URL": agent_db, "CHAOS_DIR": str(folder),
           "AGENT_SERVICE_PROFILES_FILE": str(folder / "profiles.yaml"), "AGENT_SERVICE_MAX_CONTINUATIONS": "6"}
    engine = create_engine(agent_db)
    await run_migrations(engine)
    replicas = Replicas(env, 2 if postgres else 1, tmp_path)
    expected = durable_agent.answer(note_known=False)
    started = time.monotonic()
    await replicas.start()
    try:
        async with chat_service(chat_db, replicas.relay.url, delegation=DELEGATION) as stack:
            cid = await stack.conversation()
            async with await connect(stack.chat_url, cid, "alice") as ws:
                frames: list[dict] = []
                listening = asyncio.create_task(_collect(ws, frames))
                sent = await stack.send(cid, MESSAGE)
                assert sent.status_code == 202 and sent.json()["route"]["target"] == "agent", sent.text
                session_id, run_id = await _run_of(engine)
                reader = SessionReader(replicas.relay.url, session_id, 0)
                reading = asyncio.create_task(reader.until_terminal())
                task = TaskFollower(replicas.relay.url, run_id)
                subscribed = asyncio.create_task(task.follow(time.monotonic() + 150))

                await _kill_at_every_kind_of_point(replicas, engine, run_id, reader, folder)
                terminal = await asyncio.wait_for(reading, WAIT_S)
                await asyncio.wait_for(subscribed, WAIT_S)
                await _wait_until(lambda: any(f["type"] in ("message.completed", "message.error") for f in frames),
                                  "the chat reply's end")
                listening.cancel()
            reply = await _chat_reply(stack, sent.json()["message_id"], frames)
            await stack.state.tasks.join()
        replayed = await replay_agent_log(replicas.relay.url, session_id, AGENT_KEY)
        stored = await _stored_events(engine)
        async with engine.connect() as conn:
            row = (await conn.execute(select(AgentRun.status, AgentRun.continuations).where(AgentRun.id == run_id))).one()
    finally:
        await replicas.stop()
        await engine.dispose()
    took = time.monotonic() - started
    figures = f"kills={replicas.kills} took_s={took:.1f} lookup_calls={_calls(folder, 'lookup')}"
    print(f"\nDurable run chaos ({'postgres, 2 replicas' if postgres else 'sqlite, 1 process'}): {figures}")
    record_property("figures", figures)

    # The run ended COMPLETE, continued once per kill, with its whole answer.
    assert terminal is not None and terminal.type is EventType.COMPLETE, terminal
    assert terminal.data["answer"] == expected
    assert tuple(row) == ("COMPLETED", 6) and len(replicas.kills) == 6
    resumed = [e for e in replayed if e.type is EventType.RUN_RESUMED]
    assert [e.data["continuation"] for e in resumed] == [1, 2, 3, 4, 5, 6]
    # Tool effects: the note once (its outcome unknown to the run, which said so), the lookup again.
    assert _calls(folder, "send_note") == 1
    assert _calls(folder, "lookup") >= 2
    note_ends = [e for e in replayed if e.type is EventType.TOOL_END and e.data["call_id"] == "call-note"]
    assert [(e.data["ok"], e.data["error"]) for e in note_ends] == [(False, UNKNOWN_OUTCOME)]
    # Every client shows the same text: the whole answer, each passage once.
    assert run_text(reader.events_of(run_id), run_id) == expected, "the reader that followed with Last-Event-ID"
    assert run_text(replayed, run_id) == run_text_by_seq(replayed, run_id) == expected, "a replay from 0"
    assert (task.state, task.text) == ("TASK_STATE_COMPLETED", expected), "the A2A subscriber"
    assert task.replaced >= 1  # its answer artifact was replaced, not appended to, after a cut
    assert reply.status == "complete" and reply.content == expected, "the chat's stored reply"
    assert shown_text(frames, reply.id) == expected, "the chat's WebSocket client"
    assert not [f for f in frames if f["type"] == "message.error"]
    restarted = [f for f in frames if f["type"] == "notice" and f["data"]["code"] == "agent_step_restarted"]
    assert len(restarted) == 6 and reply.agent_metadata["restarted_steps"] == 6
    assert not _reused({session_id: reader}, stored), "a seq is forever"


async def _collect(ws, frames: list[dict]) -> None:
    while True:
        frames.append(json.loads(await ws.recv()))


@pytest.mark.timeout(120)
async def test_a_run_whose_process_dies_three_times_ends_interrupted(database_factory, tmp_path: Path) -> None:
    """The default budget: two continuations. The third death ends the run as every crash did before."""
    agent_db = await database_factory("durable_budget")
    folder = tmp_path / "chaos"
    folder.mkdir()
    (folder / "profiles.yaml").write_text(durable_agent.PROFILES)
    env = {**AGENT_ENV, "AGENT_SERVICE_DATABASE_URL": agent_db, "CHAOS_DIR": str(folder),
           "AGENT_SERVICE_PROFILES_FILE": str(folder / "profiles.yaml")}
    engine = create_engine(agent_db)
    await run_migrations(engine)
    replicas = Replicas(env, 1, tmp_path)
    await replicas.start()
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            body = {"profile_name": "default", "message": "go", "user_context": {"user_id": "alice"}}
            reader_start = await _first_event(http, replicas.relay.url, body)
        reader = SessionReader(replicas.relay.url, reader_start.session_id, 0)
        reading = asyncio.create_task(reader.until_terminal())
        for death in range(3):
            await _wait_until(_chunks_since_resume(reader, death, 3), f"the model streaming before death {death + 1}")
            await replicas.kill_owner(engine, reader_start.run_id, f"death {death + 1}")
        terminal = await asyncio.wait_for(reading, WAIT_S)
        async with engine.connect() as conn:
            row = (await conn.execute(select(AgentRun.status, AgentRun.error_code, AgentRun.continuations)
                                      .where(AgentRun.id == reader_start.run_id))).one()
    finally:
        await replicas.stop()
        await engine.dispose()
    assert terminal is not None and terminal.type is EventType.ERROR and terminal.data["code"] == "INTERRUPTED"
    assert tuple(row) == ("FAILED", "INTERRUPTED", 2)
    assert [t for t, _ in (reader.seen[s][1:] for s in sorted(reader.seen))].count("RUN_RESUMED") == 2


async def _first_event(http: httpx.AsyncClient, url: str, body: dict) -> EventEnvelope:
    """Start a run with execute and read its first event (the run goes on without the connection)."""
    decoder = SSEDecoder()
    async with http.stream("POST", f"{url}/api/v1/agent/execute", json=body,
                           headers={"X-API-Key": AGENT_KEY}) as resp:
        assert resp.status_code == 200, await resp.aread()
        async for chunk in resp.aiter_bytes():
            for sse in decoder.feed(chunk):
                return decode_envelope(sse)
    raise AssertionError("the execute stream ended without an event")
