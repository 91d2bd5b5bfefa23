"""A crash in the middle of a coalesced answer: ``RUN_RESUMED`` cuts the run's text where it stands
whatever the chunks held, and every client shows the whole answer, each word once.

The durable-run chaos setup (``test_durable_runs``: the product's app with a scripted model behind a
relay, the real ConversationService delegating to it), with a model fast enough that each
``ANSWER_CHUNK`` holds several words (a word every 5 ms against the default ``STREAM_COALESCE_MS`` of
25 ms, which nothing here changes). The owner of the run is SIGKILLed while the final answer streams;
the run is continued (the same process restarted on SQLite, the other replica on PostgreSQL) and the
answer is streamed again from its step's start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import select

from agent_service.migrate import run_migrations
from agent_service.models import AgentRun
from shared.db import create_engine
from shared.protocol import EventType
from tests.chaos import durable_agent
from tests.chaos.chat_support import replay_agent_log, shown_text
from tests.chaos.test_agent_sigkill import SessionReader, _reused, _stored_events
from tests.chaos.test_durable_runs import (
    AGENT_ENV,
    DELEGATION,
    MESSAGE,
    WAIT_S,
    Replicas,
    _chat_reply,
    _collect,
    _run_of,
    _wait_until,
)
from tests.integration.conversation_service.support import connect
from tests.integration.delegation.stack import AGENT_KEY, chat_service
from tests.support.run_text import run_text, run_text_by_seq

# A word every 5 ms; short tool calls and pause between steps, so the run reaches its answer soon.
FAST = {"CHUNK_S": "0.005", "BETWEEN_S": "0.1", "TOOL_S": "0.1"}


@pytest.mark.timeout(120)
async def test_a_run_killed_while_its_answer_streams_in_coalesced_chunks_shows_each_word_once(
    database_factory, tmp_path: Path,
) -> None:
    agent_db, chat_db = await database_factory("coalesced_agent"), await database_factory("coalesced_chat")
    postgres = agent_db.startswith("postgresql")
    folder = tmp_path / "chaos"
    folder.mkdir()
    (folder / "profiles.yaml").write_text(durable_agent.PROFILES)
    env = {**AGENT_ENV, **FAST, "AGENT_SERVICE_DATABASE_URL": agent_db, "CHAOS_DIR": str(folder),
           "AGENT_SERVICE_PROFILES_FILE": str(folder / "profiles.yaml")}
    assert "STREAM_COALESCE_MS" not in env and "AGENT_SERVICE_STREAM_COALESCE_MS" not in env  # the default, on
    engine = create_engine(agent_db)
    await run_migrations(engine)
    replicas = Replicas(env, 2 if postgres else 1, tmp_path)
    expected = durable_agent.answer(note_known=True)
    hold = folder / "hold-terminal"
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
                # The run's end waits while the file is there, so the kill lands before it whatever
                # the pace: in the answer's stream or after it (its chunks then all before the cut).
                hold.write_text("hold")
                await _wait_until(_answer_chunks(reader, 3), "the answer streaming")
                await replicas.kill_owner(engine, run_id, "the answer streams", before_restart=hold.unlink)
                terminal = await asyncio.wait_for(reading, WAIT_S)
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

    assert terminal is not None and terminal.type is EventType.COMPLETE, terminal
    assert terminal.data["answer"] == expected
    assert tuple(row) == ("COMPLETED", 1)
    [resumed] = [e for e in replayed if e.type is EventType.RUN_RESUMED]
    chunks = [e for e in replayed if e.type is EventType.ANSWER_CHUNK]
    # Coalesced: chunks of several words (the cut step's, before the kill, and the step done again).
    cut = [c for c in chunks if c.seq < resumed.seq]
    assert any(len(c.data["text"].split()) >= 2 for c in cut), [c.data["text"] for c in cut]
    assert any(len(c.data["text"].split()) >= 2 for c in chunks if c.seq > resumed.seq)
    assert len(chunks) < len(expected.split()) * 2  # far from one chunk per word, with the step done twice
    # Every client shows the whole answer, each word once.
    assert run_text(reader.events_of(run_id), run_id) == expected, "the reader that followed with Last-Event-ID"
    assert reader.duplicates == 0
    assert run_text(replayed, run_id) == run_text_by_seq(replayed, run_id) == expected, "a replay from 0"
    assert reply.status == "complete" and reply.content == expected, "the chat's stored reply"
    assert shown_text(frames, reply.id) == expected, "the chat's WebSocket client"
    assert not _reused({session_id: reader}, stored), "a seq is forever"


def _answer_chunks(reader: SessionReader, at_least: int) -> Callable[[], bool]:
    """The reader saw ``at_least`` chunks of the final answer (after the note's TOOL_END)."""
    def check() -> bool:
        events = [reader.seen[seq][1:] for seq in sorted(reader.seen)]
        ends = [i for i, (t, d) in enumerate(events) if t == "TOOL_END" and d.get("call_id") == "call-note"]
        return bool(ends) and sum(t == "ANSWER_CHUNK" for t, _ in events[ends[0]:]) >= at_least
    return check
