"""Fan-out across replicas: two ConversationService apps (A and B) sharing one database and one real
Redis, one real Agent Service. A run consumed by replica A reaches the WebSocket clients of
replica B, each frame exactly once and in seq order.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from sqlalchemy import select

from agent_service.app import create_app as create_agent_app
from agent_service.settings import AgentServiceSettings
from conversation_service.db.models import ConversationFrame
from shared.llm.builtin import BuiltinProvider
from shared.transactions import transaction
from tests.integration.conversation_service.support import connect
from tests.integration.delegation.stack import AGENT_KEY, agent_service, chat_service, frames_of, recv_until
from tests.support.servers import serve_app


@asynccontextmanager
async def paced_agent_service(database_url: str, tmp_path, chunk_delay: float) -> AsyncIterator[str]:
    """The Agent Service with the built-in model streaming at a person's reading pace."""
    settings = AgentServiceSettings(database_url=database_url, api_keys=[AGENT_KEY], migrate_on_start=True,
                                    knowledge_dir=tmp_path / "no-docs")
    app = create_agent_app(settings, provider=BuiltinProvider(first_token_delay=0, chunk_delay=chunk_delay))
    async with serve_app(app) as url:
        yield url


async def _replicas(stack: AsyncExitStack, database_factory, redis_url: str, tmp_path, chunk_delay: float = 0.0):
    agent_db = await database_factory("agent")
    if chunk_delay:
        agent_url = await stack.enter_async_context(paced_agent_service(agent_db, tmp_path, chunk_delay))
    else:
        agent_url = await stack.enter_async_context(agent_service(agent_db, tmp_path))
    chat_db = await database_factory("chat")
    # A fresh prefix per test: the channel and the seq counters are this test's own.
    shared = {"redis_url": redis_url, "redis_channel_prefix": f"test:{uuid.uuid4().hex}"}
    a = await stack.enter_async_context(chat_service(chat_db, agent_url, **shared))
    b = await stack.enter_async_context(chat_service(chat_db, agent_url, **shared))
    return a, b


def _is_agent_complete(frame: dict) -> bool:
    return frame["type"] in ("agent.complete", "agent.error")


async def test_client_on_replica_b_receives_the_run_consumed_by_replica_a(database_factory, redis_url, tmp_path):
    async with AsyncExitStack() as stack:
        a, b = await _replicas(stack, database_factory, redis_url, tmp_path)
        cid = await a.conversation()
        ws_b = await stack.enter_async_context(await connect(b.chat_url, cid, "alice"))
        ws_a = await stack.enter_async_context(await connect(a.chat_url, cid, "alice"))
        r = await a.send(cid, "/agent what is 17*23")
        assert r.status_code == 202 and r.json()["route"]["target"] == "agent"
        frames_b = await recv_until(ws_b, _is_agent_complete)
        frames_a = await recv_until(ws_a, _is_agent_complete)
        await a.state.tasks.join()
        await a.state.realtime.writer.flush()
        # Only replica A ran the turn: B's delegation never started one.
        a_turns, b_turns = (
            replica.state.metrics.registry.get_sample_value("conversation_agent_turns_total", {"outcome": "complete"})
            for replica in (a, b)
        )
        async with transaction(a.state.storage.sessionmaker) as session:
            persisted = (await session.scalars(
                select(ConversationFrame).where(ConversationFrame.conversation_id == cid)
                .order_by(ConversationFrame.seq)
            )).all()

    assert (a_turns, b_turns) == (1.0, 0.0)
    types = [f["type"] for f in frames_b]
    assert types[-1] == "agent.complete", types
    for expected in ("message.created", "agent.tool_start", "agent.tool_end", "message.delta", "message.completed"):
        assert expected in types, types
    seqs = [f["seq"] for f in frames_b]
    # Exactly once and in order: strictly increasing with no gap, from the user's message to the end.
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    assert frames_b == frames_a  # both replicas' clients saw the same stream
    assert [(f.seq, f.type, f.data) for f in persisted] == [(f["seq"], f["type"], f["data"]) for f in frames_b]

    assistant = next(f for f in frames_b if f["type"] == "message.created" and f["data"]["role"] == "assistant")
    message_id = assistant["data"]["id"]
    deltas = "".join(f["data"]["text"] for f in frames_of(frames_b, "message.delta"))
    final = [f for f in frames_of(frames_b, "message.completed") if f["data"]["message_id"] == message_id][-1]
    assert final["data"]["content"] == deltas and "391" in deltas
    start, end = frames_of(frames_b, "agent.tool_start")[0]["data"], frames_of(frames_b, "agent.tool_end")[0]["data"]
    assert start["tool"] == "calculator" and end["call_id"] == start["call_id"] and end["ok"] is True


async def test_client_joining_replica_b_mid_run_gets_everything_once(database_factory, redis_url, tmp_path):
    """A client that connects to B after the run started asks for everything (after_seq=0): the
    replay from the database and the live frames from Redis join with no gap and no duplicate."""
    async with AsyncExitStack() as stack:
        a, b = await _replicas(stack, database_factory, redis_url, tmp_path, chunk_delay=0.05)
        cid = await a.conversation()
        ws_a = await stack.enter_async_context(await connect(a.chat_url, cid, "alice"))
        r = await a.send(cid, "/agent what is 17*23")
        assert r.status_code == 202
        early = await recv_until(ws_a, lambda f: f["type"] == "agent.tool_start")
        ws_b = await stack.enter_async_context(await connect(b.chat_url, cid, "alice", after_seq=0))
        allocated_at_join = await b.state.realtime.seq.current(cid)
        frames_b = await recv_until(ws_b, _is_agent_complete)
        frames_a = early + await recv_until(ws_a, _is_agent_complete)

    seqs = [f["seq"] for f in frames_b]
    assert seqs == list(range(1, len(seqs) + 1))
    assert frames_b == frames_a
    # The join really was mid-run: frames up to the tool start came from the replay, later ones live.
    assert early[-1]["seq"] <= allocated_at_join < seqs[-1]
