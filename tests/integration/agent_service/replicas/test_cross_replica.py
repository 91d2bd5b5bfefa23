"""What a client sees through a replica that does not run the session: the replay tails the run
from the shared log, and a cancel stops the run where it executes."""

from __future__ import annotations

import asyncio

from tests.integration.agent_service.conftest import assert_contiguous
from tests.integration.agent_service.replicas.support import (
    MESSAGE,
    REPLICA_SETTINGS,
    SEQ_BLOCK,
    GatedProvider,
    keeper,
    log_events,
    manager,
    run_row,
    wait_for_status,
)


def _wire(events) -> list[tuple[int, str, str, dict]]:
    return [(e.seq, e.run_id, e.type.value, e.data) for e in events]


async def test_a_client_following_on_another_replica_sees_every_event_once_in_order(agent_factory) -> None:
    provider = GatedProvider(hold_after=4)
    async with agent_factory(provider=provider, **REPLICA_SETTINGS) as a, \
            agent_factory(**REPLICA_SETTINGS) as b:
        execute = asyncio.create_task(a.execute(MESSAGE))
        await provider.held.wait()
        session_id = manager(a).active()[0].handle.session_id
        assert manager(b).get(session_id) is None

        # One follower from the start, one resuming after seq 2, both on B, joined mid-run.
        seen = asyncio.Event()
        from_start = asyncio.create_task(b.replay(session_id, 0, on_event=lambda e: seen.set()))
        resumed = asyncio.create_task(b.replay(session_id, 2))
        await seen.wait()  # B is tailing the log while the run is held on A
        provider.gate.set()
        own, followed, later = await asyncio.gather(execute, from_start, resumed)

    assert own.last.type.value == "COMPLETE"
    assert_contiguous(own.events)
    assert _wire(followed.events) == _wire(own.events)
    assert _wire(later.events) == _wire(own.events[2:])


async def test_cancel_sent_to_another_replica_stops_the_run_where_it_executes(agent_factory, db) -> None:
    provider = GatedProvider(hold_after=3)
    async with agent_factory(provider=provider, **REPLICA_SETTINGS) as a, \
            agent_factory(**REPLICA_SETTINGS) as b:
        execute = asyncio.create_task(a.execute(MESSAGE))
        await provider.held.wait()
        session_id = manager(a).active()[0].handle.session_id
        run = manager(a).get(session_id)

        resp = await b.http.post(f"/api/v1/agent/sessions/{session_id}/cancel", headers=b.headers())
        # A noticed the request at its next renewal and ended the run before B answered.
        assert resp.status_code == 200, resp.text
        assert resp.json()["status"] == "CANCELLED"
        result = await execute
        assert run.task.done() and manager(a).get(session_id) is None

    assert result.last.type.value == "ERROR" and result.last.data["code"] == "CANCELLED"
    assert_contiguous(result.events)
    events = await log_events(db, session_id)
    assert [e.seq for e in events] == result.seqs
    assert [e.type for e in events].count("ERROR") == 1
    row = await run_row(db, run.handle.run_id)
    assert row.status == "CANCELLED" and row.error_code == "CANCELLED" and row.cancel_requested_at is not None


async def test_cancel_of_a_run_whose_replica_is_gone_is_accepted_and_ends_it_cancelled(agent_factory, db) -> None:
    provider = GatedProvider(hold_after=3)
    # A lease longer than the cancel call waits: the run is still A's when B answers.
    settings = {**REPLICA_SETTINGS, "lease_seconds": 3.0}
    async with agent_factory(provider=provider, **settings) as a, agent_factory(**settings) as b:
        first = await a.execute(MESSAGE, stop_after=1)
        session_id = first.events[0].session_id
        await provider.held.wait()
        run = manager(a).get(session_id)
        await keeper(a).aclose()  # A is gone as far as anyone can tell: nobody acts on the request

        resp = await b.http.post(f"/api/v1/agent/sessions/{session_id}/cancel", headers=b.headers())
        assert resp.status_code == 202, resp.text
        assert resp.json()["status"] == "ACTIVE"

        # Once A's lease expires, B's recovery ends the run, as the cancel asked.
        status = await wait_for_status(b, session_id, "CANCELLED")
        events = await log_events(db, session_id)
        # The run's own events, then its end above every seq A reserved (and may have shown).
        assert [e.seq for e in events[:-1]] == list(range(1, len(events)))
        assert events[-1].seq == SEQ_BLOCK + 1
        assert [e.type for e in events].count("ERROR") == 1
        assert events[-1].type == "ERROR" and events[-1].data["code"] == "CANCELLED"
        assert status["last_seq"] == events[-1].seq
        row = await run_row(db, run.handle.run_id)
        assert row.status == "CANCELLED" and row.owner_id == manager(b).owner_id

        again = await b.http.post(f"/api/v1/agent/sessions/{session_id}/cancel", headers=b.headers())
        assert again.status_code == 409 and again.json()["error"] == "nothing_to_cancel"


async def test_cancel_on_the_replica_running_the_session_answers_as_before(agent_factory) -> None:
    provider = GatedProvider(hold_after=3)
    async with agent_factory(provider=provider, **REPLICA_SETTINGS) as a:
        execute = asyncio.create_task(a.execute(MESSAGE))
        await provider.held.wait()
        session_id = manager(a).active()[0].handle.session_id
        resp = await a.http.post(f"/api/v1/agent/sessions/{session_id}/cancel", headers=a.headers())
        assert resp.status_code == 200 and resp.json()["status"] == "CANCELLED"
        result = await execute
    assert result.last.data["code"] == "CANCELLED"
