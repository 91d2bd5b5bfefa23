"""The Agent Service under load with its database calls cancelled at random points (SQLite and
PostgreSQL): afterwards nothing is held and the next requests succeed.

120 executes at once (plain answers, the calculator, the knowledge search, memory writes and
recalls) on a real server. Cancels land in the statements of the tasks that are cancelled in
production (requests whose client went away, runs cancelled or interrupted, the memory store's calls)
while the statement is in the driver: one in two of the runs' and the store's, one in twenty of the
requests'. Afterwards, once the runs have
ended: no run or session is left ACTIVE (no lease held), every pooled connection is checked in, the
SQLite write gate is free and the file writable, no PostgreSQL session of the database is in a
transaction or holds a lock; and 20 more executes all complete.
"""

from __future__ import annotations

import asyncio
import random

import httpx

from agent_service.models import AgentRun, AgentSession
from tests.support.faults import cancel_statements, held_by

MESSAGES = (
    "tell me something", "what is 17*23", "search the docs for retention",
    "remember that my favourite colour is green", "what is my favourite colour?",
)
BURST = 120


def _chance(manager):
    """The chance that a statement of ``task`` is cancelled: requests (a client that went away)
    rarely, so that most runs start; runs and memory store calls often."""

    def chance(task: asyncio.Task, _statement: str) -> float:
        name = task.get_name()
        if name.startswith("memory ") or task.get_coro().__qualname__.endswith("Tool.run"):
            return 0.5  # the store's calls; a tool's (its own task, under the tool's timeout)
        # uvicorn runs each request in a task of its own (its coroutine is the server's run_asgi).
        if task.get_coro().__qualname__.endswith("run_asgi"):
            return 0.05
        if name.startswith("agent-run-"):
            # A run being finished is never cancelled (RunManager keeps its terminal write whole).
            return 0.5 if any(run.task is task and not run.finishing for run in manager.active()) else 0.0
        return 0.0

    return chance


async def _execute(agent, i: int) -> str:
    body = {"profile_name": "default", "message": MESSAGES[i % len(MESSAGES)],
            "user_context": {"user_id": f"u{i % 7}", "org_id": "acme"}}
    try:
        async with agent.http.stream("POST", "/api/v1/agent/execute", json=body, headers=agent.headers()) as resp:
            if resp.status_code != 200:
                return f"HTTP {resp.status_code}"  # a request cancelled mid-claim: answered 500, written nothing
            last = None
            async for line in resp.aiter_lines():
                if line.startswith("event: "):
                    last = line.removeprefix("event: ")
            return last or "no event"
    except httpx.HTTPError as exc:
        return type(exc).__name__


async def _all_runs_ended(agent, timeout: float = 30) -> None:
    manager = agent.app.state.agent.run_manager
    async with asyncio.timeout(timeout):
        while manager.active():
            await asyncio.sleep(0.05)  # runs ending in their own tasks


async def test_cancelled_database_calls_under_load_leave_nothing_held(agent_factory, db) -> None:
    # The store's health never goes DOWN here, so that it keeps being called (and cancelled).
    async with agent_factory(memory_timeout_seconds=0.5, memory_fail_max=1000) as agent:
        state = agent.app.state.agent
        engine = state.db_engine
        with cancel_statements(engine, chance=_chance(state.run_manager), rng=random.Random(7)) as cancelled:
            outcomes = await asyncio.gather(*(_execute(agent, i) for i in range(BURST)))
            await _all_runs_ended(agent)
        assert len(cancelled) >= 10, f"the faults reached few statements: {len(cancelled)}"
        assert "COMPLETE" in outcomes, outcomes
        await state.memory.written()

        assert await db.count(AgentRun, status="ACTIVE") == 0, "a run left ACTIVE holds its lease"
        assert await db.count(AgentSession, status="ACTIVE") == 0
        async with asyncio.timeout(5):
            while await held_by(engine):
                await asyncio.sleep(0.05)  # late store calls giving their connections back

        after = await asyncio.gather(*(_execute(agent, i) for i in range(20)))
        assert after == ["COMPLETE"] * 20, after
