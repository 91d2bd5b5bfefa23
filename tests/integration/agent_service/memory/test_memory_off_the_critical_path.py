"""A slow memory store costs a run at most its budget, and a run never waits for its memory write.

The store is slowed for real: its statements wait in the driver (``hold_statements``), holding their
connection (on SQLite the write turn too). Recall gives up after its budget and the statement runs
on to its end, giving its connection back; a completed run's turn is written after its COMPLETE is
stored, from a bounded queue that drops (and counts) what does not fit.
"""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import func, select
from sqlalchemy.util import await_

from agent_service.models import AgentEvent
from tests.support.faults import held_by, hold_statements

ALICE = {"user_id": "alice", "org_id": "acme"}
RECALL = lambda sql: "agent_memories" in sql and sql.lstrip().upper().startswith("SELECT")
REMEMBER = lambda sql: sql.startswith("INSERT INTO agent_memories")


def _state(agent):
    return agent.app.state.agent


async def _execute(agent, message: str):
    result = await agent.execute(message, body={"user_context": ALICE})
    assert result.last.type.value == "COMPLETE", result.last.data
    return result


async def test_a_slow_recall_costs_the_run_its_budget_and_gives_its_connection_back(agent_factory) -> None:
    async with agent_factory(memory_timeout_seconds=0.3) as agent:
        engine, release = _state(agent).db_engine, asyncio.Event()
        with hold_statements(engine, release, where=RECALL) as held:
            started = time.perf_counter()
            result = await _execute(agent, "what is my favourite colour?")
            took = time.perf_counter() - started
        assert held, "the recall's statement was held"
        assert took < 2.0, f"the run waited {took:.2f} s for a store that did not answer"
        assert "agent_memory_failures_total{operation=\"recall\"} 1.0" in (await agent.http.get("/metrics")).text
        assert result.last.data["answer"]
        release.set()  # the store answers at last: the recall ends in the background
        await _state(agent).memory.written()
        async with asyncio.timeout(5):
            while await held_by(engine):
                await asyncio.sleep(0.01)  # the late recall finishing in the background


async def test_a_completed_run_is_remembered_after_its_terminal_event_is_stored(agent_factory, db) -> None:
    async with agent_factory() as agent:
        release, stored_before = asyncio.Event(), []

        def terminal_events(_sql: str) -> None:
            # Runs in the INSERT's greenlet: read what the log holds at the moment memory is written.
            async def count() -> int:
                async with db.sessionmaker() as session:
                    return (await session.execute(
                        select(func.count()).select_from(AgentEvent).where(AgentEvent.type == "COMPLETE"))).scalar_one()

            stored_before.append(await_(count()))

        with hold_statements(_state(agent).db_engine, release, where=REMEMBER, on_hold=terminal_events):
            result = await _execute(agent, "remember that my favourite colour is green")
            listed = await agent.http.get("/api/v1/agent/memory", params=ALICE, headers=agent.headers())
            assert listed.json()["items"] == [], "COMPLETE came before the memory write"
            release.set()
            await _state(agent).memory.written()
        assert stored_before == [1], "the run's COMPLETE was stored when its turn was remembered"
        listed = await agent.http.get("/api/v1/agent/memory", params=ALICE, headers=agent.headers())
        [item] = listed.json()["items"]
        assert item["session_id"] == result.last.session_id


async def test_a_full_write_queue_drops_turns_and_counts_them(agent_factory) -> None:
    async with agent_factory(memory_write_queue_size=1, memory_timeout_seconds=30) as agent:
        release = asyncio.Event()
        with hold_statements(_state(agent).db_engine, release, where=REMEMBER) as held:
            await _execute(agent, "remember that my favourite colour is green")
            async with asyncio.timeout(5):
                while not held:
                    await asyncio.sleep(0.01)  # the writer picked the first turn up: the queue is empty again
            await _execute(agent, "remember that my dog is called Rex")  # queued
            await _execute(agent, "remember that my cat is called Tom")  # no room: dropped
            metrics = (await agent.http.get("/metrics")).text
            assert 'agent_memory_writes_dropped_total{reason="queue_full"} 1.0' in metrics
            release.set()
            await _state(agent).memory.written()
        listed = await agent.http.get("/api/v1/agent/memory", params=ALICE, headers=agent.headers())
        assert len(listed.json()["items"]) == 2


async def test_shutdown_drains_the_write_queue_within_its_bound(agent_factory) -> None:
    release = asyncio.Event()
    agent_cm = agent_factory(memory_drain_seconds=0.2, memory_timeout_seconds=30)
    agent = await agent_cm.__aenter__()
    registry = _state(agent).metrics.registry
    with hold_statements(_state(agent).db_engine, release, where=REMEMBER) as held:
        await _execute(agent, "remember that my favourite colour is green")
        await _execute(agent, "remember that my dog is called Rex")
        async with asyncio.timeout(5):
            while not held:
                await asyncio.sleep(0.01)  # the writer is in the first write, the second one queued
        started = time.perf_counter()
        await agent_cm.__aexit__(None, None, None)
        took = time.perf_counter() - started
    assert took < 3.0, f"shutdown took {took:.2f} s with a store that never answers"
    dropped = registry.get_sample_value("agent_memory_writes_dropped_total", {"reason": "shutdown"})
    assert dropped == 1.0, "the queued turn not written in time is counted"
