"""Replicas sharing one database: a live replica's runs are left alone, a dead one's are taken exactly
once (continued, or failed where they may not be continued: ``max_continuations`` 0 here), and
concurrent recoveries never take a run twice. Continuation itself: ``test_continuation``."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from agent_service.models import AgentEvent, AgentRun, AgentSession
from shared.protocol import utcnow
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

# Runs of a dead replica are ended, not continued: what these tests hold for the lease mechanics.
NOT_CONTINUED = {**REPLICA_SETTINGS, "max_continuations": 0}


async def test_starting_a_replica_leaves_the_runs_of_a_live_one_alone(agent_factory, db) -> None:
    provider = GatedProvider(hold_after=3)
    async with agent_factory(provider=provider, **REPLICA_SETTINGS) as a:
        execute = asyncio.create_task(a.execute(MESSAGE))
        await provider.held.wait()
        session_id = manager(a).active()[0].handle.session_id
        run_id = manager(a).get(session_id).handle.run_id

        async with agent_factory(**REPLICA_SETTINGS) as b:
            # B recovered at start-up; now let its periodic recovery run for well over a lease
            # (12 passes of 0.2 s against a 2 s lease): only A's renewals keep the run alive.
            await keeper(b).wait_for_passes(12)
            assert (await b.status(session_id))["status"] == "ACTIVE"
            row = await run_row(db, run_id)
            assert row.status == "ACTIVE" and row.owner_id == manager(a).owner_id
            assert row.lease_expires_at > utcnow()
            assert await keeper(b).recover() == 0

            provider.gate.set()
            result = await execute
        assert result.last.type.value == "COMPLETE"
        assert not result.of_type("ERROR")
        assert result.seqs == list(range(1, len(result.events) + 1))
        row = await run_row(db, run_id)
        assert row.status == "COMPLETED" and row.error_code is None


async def test_a_crashed_owner_s_run_that_may_not_be_continued_is_failed_once_by_another_replica(
    agent_factory, db,
) -> None:
    provider = GatedProvider(hold_after=3)
    async with agent_factory(provider=provider, **NOT_CONTINUED) as a, \
            agent_factory(**NOT_CONTINUED) as b:
        first = await a.execute(MESSAGE, stop_after=2)
        session_id = first.events[0].session_id
        await provider.held.wait()
        run = manager(a).get(session_id)
        # A crash, as far as the database can tell: A stops renewing, its run stays hung.
        await keeper(a).aclose()

        status = await wait_for_status(b, session_id, "FAILED")
        events = await log_events(db, session_id)
        # The run's own events, then its end above every seq A reserved (and may have shown).
        assert [e.seq for e in events[:-1]] == list(range(1, len(events)))
        assert events[-1].seq == SEQ_BLOCK + 1
        errors = [e for e in events if e.type == "ERROR"]
        assert len(errors) == 1 and errors[0] is events[-1]
        assert errors[0].run_id == run.handle.run_id
        assert errors[0].data["code"] == "INTERRUPTED" and errors[0].data["retryable"] is True
        assert status["last_seq"] == events[-1].seq
        row = await run_row(db, run.handle.run_id)
        assert row.status == "FAILED" and row.error_code == "INTERRUPTED" and row.owner_id == manager(b).owner_id

        # More passes of B, and an explicit recovery, find nothing more to do.
        await keeper(b).wait_for_passes(3)
        assert await keeper(b).recover() == 0
        metrics = (await b.http.get("/metrics")).text
        assert 'agent_runs_failed_total{code="INTERRUPTED"} 1.0' in metrics

        # A comes back to life: its next renewal learns the run is no longer its own and stops it
        # without writing anything (its next seqs already belong to B's ERROR).
        keeper(a).start()
        await asyncio.wait_for(asyncio.shield(run.task), timeout=10)
        assert manager(a).get(session_id) is None
        assert [(e.seq, e.type) for e in await log_events(db, session_id)] == [(e.seq, e.type) for e in events]
        assert (await a.status(session_id))["status"] == "FAILED"

        # The session is usable again, on either replica.
        again = await b.execute("what is 2+2", body={"session_id": session_id})
        assert again.last.type.value == "COMPLETE" and again.events[0].seq == events[-1].seq + 1


async def test_a_run_ending_after_its_lease_was_taken_writes_nothing(agent_factory, db) -> None:
    provider = GatedProvider(hold_after=3)
    async with agent_factory(provider=provider, **NOT_CONTINUED) as a, \
            agent_factory(**NOT_CONTINUED) as b:
        first = await a.execute(MESSAGE, stop_after=1)
        session_id = first.events[0].session_id
        await provider.held.wait()
        run = manager(a).get(session_id)
        await keeper(a).aclose()
        await wait_for_status(b, session_id, "FAILED")
        before = [(e.seq, e.type) for e in await log_events(db, session_id)]

        # A, still unaware, lets the model finish: its terminal write is refused as a whole.
        provider.gate.set()
        await asyncio.wait_for(asyncio.shield(run.task), timeout=10)
        assert [(e.seq, e.type) for e in await log_events(db, session_id)] == before
        assert (await a.status(session_id))["status"] == "FAILED"
        row = await run_row(db, run.handle.run_id)
        assert row.status == "FAILED" and row.error_code == "INTERRUPTED"


@pytest.mark.parametrize("continued", [False, True], ids=["failed", "continued"])
async def test_two_replicas_recovering_at_once_take_each_orphan_exactly_once(
    agent_factory, db, continued: bool,
) -> None:
    # Long renewals: no periodic pass interferes; the two recoveries below are the only ones.
    settings = {"lease_seconds": 120.0, "lease_renew_seconds": 60.0, "max_continuations": 2 if continued else 0}
    async with agent_factory(**settings) as a, agent_factory(**settings) as b:
        now = utcnow()
        orphans = [f"orphan-{i:02d}" for i in range(50)]
        async with db.sessionmaker.begin() as s:
            for session_id in [*orphans, "alive"]:
                s.add(AgentSession(
                    id=session_id, profile_name="default", status="ACTIVE", user_context={"user_id": "u"},
                    transcript=[{"role": "user", "content": "what is 1+1"}], last_seq=2,
                    current_run_id=f"run-{session_id}", created_at=now, updated_at=now,
                ))
            await s.flush()
            for session_id in [*orphans, "alive"]:
                alive = session_id == "alive"
                s.add(AgentRun(
                    id=f"run-{session_id}", session_id=session_id, status="ACTIVE", first_seq=1, started_at=now,
                    owner_id="replica-elsewhere" if alive else "replica-gone",
                    lease_expires_at=now + timedelta(seconds=60) if alive else now - timedelta(seconds=1),
                ))
                for seq in (1, 2):
                    s.add(AgentEvent(session_id=session_id, seq=seq, run_id=f"run-{session_id}", type="ANSWER_CHUNK",
                                     ts=now, data={"text": "partial "}))

        counts = await asyncio.gather(keeper(a).recover(), keeper(b).recover())
        assert sum(counts) == 50
        if continued:
            await _each_continued_once(a, b, db, orphans)
            return

        async with db.sessionmaker() as s:
            for session_id in orphans:
                events = await log_events(db, session_id)
                assert [(e.seq, e.type) for e in events] == [(1, "ANSWER_CHUNK"), (2, "ANSWER_CHUNK"), (3, "ERROR")]
                assert events[-1].data["code"] == "INTERRUPTED"
                session = await s.get(AgentSession, session_id)
                assert session.status == "FAILED" and session.last_seq == 3
                run = await s.get(AgentRun, f"run-{session_id}")
                assert run.status == "FAILED" and run.error_code == "INTERRUPTED"
                assert run.owner_id in (manager(a).owner_id, manager(b).owner_id)
            alive_session = await s.get(AgentSession, "alive")
            assert alive_session.status == "ACTIVE"
            assert (await s.get(AgentRun, "run-alive")).status == "ACTIVE"
        assert await db.events("alive") == 2
        assert await asyncio.gather(keeper(a).recover(), keeper(b).recover()) == [0, 0]


async def _each_continued_once(a, b, db, orphans: list[str]) -> None:
    """Each orphan went on under one replica: one RUN_RESUMED after its two chunks, then its answer."""
    for session_id in orphans:
        owner = a if manager(a).get(session_id) is not None else b
        log = await owner.replay(session_id, 0)  # to its end
        types = [e.type.value for e in log.events]
        assert types[:3] == ["ANSWER_CHUNK", "ANSWER_CHUNK", "RUN_RESUMED"] and types[-1] == "COMPLETE", types
        assert types.count("RUN_RESUMED") == 1 and types.count("COMPLETE") == 1
        row = await run_row(db, f"run-{session_id}")
        assert row.status == "COMPLETED" and row.continuations == 1
        assert row.owner_id in (manager(a).owner_id, manager(b).owner_id)
    assert (await run_row(db, "run-alive")).status == "ACTIVE"
    assert await asyncio.gather(keeper(a).recover(), keeper(b).recover()) == [0, 0]
