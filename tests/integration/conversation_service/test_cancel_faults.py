"""The ConversationService under load with its database calls cancelled at random points (SQLite and
PostgreSQL): afterwards nothing is held, every accepted message ended, and the next messages are answered.

100 messages at once over 20 conversations (direct replies of the built-in model), on a real server.
Cancels land, while the statement is in the driver, in the statements that store a posted message
(one in five: a request cancelled, as a shutdown cancels it) and in those of direct replies (one in
three: the user's Stop, which cancels the reply's task through ``ReplyStops``). Afterwards: every
turn has ended, every pooled connection is checked in, the SQLite write gate is free and the file
writable, no PostgreSQL session of the database is in a transaction or holds a lock; and ten more
messages are all answered.

Not injected: a cancel of a request after its message was stored, or of a reply task for another
reason than a Stop. Both happen only at a shutdown, and leave the turn running for a takeover by
another replica or the restarted one (``TurnLeases.hold``, ``TurnRepository.claim_expired``): a live
process does not take over its own turns, so within this test they would not end.
"""

from __future__ import annotations

import asyncio
import random

import httpx
from sqlalchemy import func, select

from conversation_service.db.models import Turn, TurnStatus
from shared.llm.config import LLMSettings
from tests.integration.conversation_service.support import auth, make_settings, new_conversation, running
from tests.support.faults import cancel_statements, held_by

DIRECT_REPLY = "direct-reply:"
FAST = LLMSettings(llm_builtin_first_token_ms=0, llm_builtin_chunk_delay_ms=0)


# The statements of the transaction that stores a posted message and opens its turn.
STORING = ("INSERT INTO messages", "UPDATE conversations SET updated_at", "INSERT INTO turns")


def _chance(task: asyncio.Task, statement: str) -> float:
    if task.get_name().startswith(DIRECT_REPLY):
        return 0.33
    # uvicorn runs each request in a task of its own (its coroutine is the server's run_asgi).
    if task.get_coro().__qualname__.endswith("run_asgi") and statement.startswith(STORING):
        return 0.2
    return 0.0


def _cancel(app):
    def cancel(task: asyncio.Task) -> None:
        name = task.get_name()
        if name.startswith(DIRECT_REPLY):
            app.state.leases.stops.stop(name.removeprefix(DIRECT_REPLY))  # a Stop (only while it streams)
        else:
            task.cancel()

    return cancel


async def _post(client: httpx.AsyncClient, base: str, conversation: str, user: str, i: int) -> int:
    try:
        r = await client.post(f"{base}/conversations/{conversation}/messages", json={"content": f"hello {i}"},
                              headers=auth(user))
    except httpx.HTTPError:
        return 0  # the request's task was cancelled: the connection was cut
    return r.status_code


async def _running_turns(app) -> int:
    async with app.state.storage.sessionmaker() as session:
        return (await session.execute(
            select(func.count()).select_from(Turn).where(Turn.status == TurnStatus.RUNNING.value))).scalar_one()


async def _nothing_held(engine) -> None:
    """Nothing held, once the background work of the moment (a frame flush, a lease renewal) is over."""
    try:
        async with asyncio.timeout(5):
            while await held_by(engine):
                await asyncio.sleep(0.05)  # a connection in use by a periodic job returns within ms
    except TimeoutError:
        raise AssertionError(f"still held after 5 s: {await held_by(engine)}") from None


async def test_cancelled_database_calls_under_load_leave_nothing_held(database_url: str) -> None:
    # Short leases: a reply cancelled half-way is taken over (and ended) within seconds.
    settings = make_settings(database_url, llm=FAST, turn_lease_s=2, turn_sweep_interval_s=0.5)
    async with running(settings) as (base, app), httpx.AsyncClient(timeout=30) as client:
        users = [f"user{i}" for i in range(20)]
        conversations = [(await new_conversation(client, base, user))["id"] for user in users]
        engine = app.state.storage.engine
        with cancel_statements(engine, chance=_chance, cancel=_cancel(app), rng=random.Random(11)) as cancelled:
            statuses = await asyncio.gather(*(
                _post(client, base, conversations[i % 20], users[i % 20], i) for i in range(100)))
            async with asyncio.timeout(30):
                while app.state.tasks.running:
                    await asyncio.sleep(0.05)  # the replies started by the posts, in their own tasks
        # The faults over: the turns left running by cancelled replies are taken over and ended.
        async with asyncio.timeout(60):
            while await _running_turns(app) or app.state.tasks.running:
                await asyncio.sleep(0.1)  # takeovers, each in a task of its own
        assert len(cancelled) >= 10, f"the faults reached few statements: {len(cancelled)}"
        assert 202 in statuses, statuses
        await _nothing_held(engine)

        after = await asyncio.gather(*(
            _post(client, base, conversations[i], users[i], 1000 + i) for i in range(10)))
        assert after == [202] * 10, after
        async with asyncio.timeout(30):
            while await _running_turns(app):
                await asyncio.sleep(0.05)  # the ten replies streaming
        await _nothing_held(engine)
