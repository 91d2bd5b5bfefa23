"""Turn leases against the real databases (SQLite and PostgreSQL): a turn is opened owned, renewed
only by its owner, claimed by exactly one replica once its lease ran out, and released for an
immediate takeover on a graceful shutdown."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest

from conversation_service.db import migrate
from conversation_service.db.models import Conversation, Message, TurnStatus, utcnow
from conversation_service.turns.leases import TurnLeases, TurnLeftRunning
from conversation_service.turns.repository import TurnRepository
from shared.db import create_engine, create_lease_engine, create_sessionmaker
from shared.transactions import transaction


@pytest.fixture
async def sessionmaker(database_url: str):
    """A migrated database's sessions, its engine disposed after the test."""
    engine = create_engine(database_url)
    await migrate.upgrade(engine)
    try:
        yield create_sessionmaker(engine)
    finally:
        await engine.dispose()


async def _accepted_message(sessionmaker, leases: TurnLeases) -> str:
    async with transaction(sessionmaker) as session:
        conversation = Conversation(owner_id="alice", title="t")
        session.add(conversation)
        await session.flush()
        message = Message(conversation_id=conversation.id, role="user", content="hi")
        session.add(message)
        await session.flush()
        await leases.open(session, message.id, conversation.id)
        return message.id


async def _turn(sessionmaker, turn_id: str):
    async with transaction(sessionmaker) as session:
        return await TurnRepository(session).get(turn_id)


async def test_an_expired_turn_is_claimed_by_exactly_one_replica(sessionmaker) -> None:
    dead = TurnLeases(sessionmaker, lease_s=1)
    turn_id = await _accepted_message(sessionmaker, dead)
    a, b = TurnLeases(sessionmaker, lease_s=30), TurnLeases(sessionmaker, lease_s=30)
    assert await a.claim_expired(10) == []  # the lease still runs: nobody takes it
    async with transaction(sessionmaker) as session:  # the owner died a lease ago
        turn = await TurnRepository(session).get(turn_id)
        turn.lease_expires_at = utcnow() - timedelta(seconds=1)
    claims = await asyncio.gather(a.claim_expired(10), b.claim_expired(10))
    assert sorted(len(c) for c in claims) == [0, 1]
    winner = a if claims[0] else b
    turn = await _turn(sessionmaker, turn_id)
    assert turn.owner_id == winner.replica_id and turn.takeovers == 1
    assert turn.lease_expires_at > utcnow() + timedelta(seconds=20)
    assert turn_id in winner.held

    await dead.renew()  # the old owner, back from a stall, renews nothing it lost
    assert (await _turn(sessionmaker, turn_id)).owner_id == winner.replica_id
    await winner.finish(turn_id)
    turn = await _turn(sessionmaker, turn_id)
    assert turn.status == TurnStatus.DONE.value and turn.owner_id is None and turn_id not in winner.held


async def test_a_released_turn_is_taken_over_at_once(sessionmaker) -> None:
    stopping = TurnLeases(sessionmaker, lease_s=300)
    turn_id = await _accepted_message(sessionmaker, stopping)
    await stopping.renew()
    other = TurnLeases(sessionmaker, lease_s=300)
    assert await other.claim_expired(10) == []
    await stopping.release()  # graceful shutdown
    assert [t.id for t in await other.claim_expired(10)] == [turn_id]


async def test_a_reply_held_to_its_end_marks_the_turn_done_and_a_cancelled_one_leaves_it_running(
    sessionmaker,
) -> None:
    leases = TurnLeases(sessionmaker, lease_s=30)
    answered = await _accepted_message(sessionmaker, leases)
    stopped = await _accepted_message(sessionmaker, leases)

    async def reply() -> str:
        return "ok"

    assert await leases.hold(answered, reply()) == "ok"
    assert (await _turn(sessionmaker, answered)).status == TurnStatus.DONE.value

    started = asyncio.Event()

    async def streaming() -> None:
        started.set()
        await asyncio.Event().wait()  # a reply still streaming when the service stops

    task = asyncio.create_task(leases.hold(stopped, streaming()))
    await started.wait()
    assert stopped in leases.held
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    # Shutdown: still running (another replica takes it over), no longer held here.
    assert (await _turn(sessionmaker, stopped)).status == TurnStatus.RUNNING.value
    assert stopped not in leases.held


async def test_a_turn_its_reply_could_not_end_is_left_running_for_this_replicas_own_sweep(sessionmaker) -> None:
    leases = TurnLeases(sessionmaker, lease_s=30)
    given_up = await _accepted_message(sessionmaker, leases)
    mine = await _accepted_message(sessionmaker, leases)  # merely renewed late: still left to this replica

    async def reply() -> None:
        raise TurnLeftRunning("the database is down")

    with pytest.raises(TurnLeftRunning):
        await leases.hold(given_up, reply())
    assert (await _turn(sessionmaker, given_up)).status == TurnStatus.RUNNING.value
    assert given_up not in leases.held
    async with transaction(sessionmaker) as session:  # a lease later
        for turn_id in (given_up, mine):
            (await TurnRepository(session).get(turn_id)).lease_expires_at = utcnow() - timedelta(seconds=1)
    assert [t.id for t in await leases.claim_expired(10)] == [given_up]
    turn = await _turn(sessionmaker, given_up)
    assert turn.owner_id == leases.replica_id and turn.takeovers == 1
    assert given_up in leases.held and not leases.abandoned


async def test_only_a_turn_still_running_here_that_the_renewal_missed_is_reported_lost(
    sessionmaker, caplog: pytest.LogCaptureFixture,
) -> None:
    """The renewal compares what its UPDATE found with the turns still running here afterwards: a
    turn that finished meanwhile, or one opened meanwhile, is no lost lease (under load the old
    count-based check warned of lost leases every few seconds while none was lost); a turn another
    replica took over is."""
    leases = TurnLeases(sessionmaker, lease_s=300)
    ending, kept, taken = [await _accepted_message(sessionmaker, leases) for _ in range(3)]
    leases.held.update({ending, kept, taken})
    async with transaction(sessionmaker) as session:  # another replica's sweep took it
        (await TurnRepository(session).get(taken)).owner_id = "another-replica"
    renew = TurnRepository.renew

    async def renew_while_turns_change(self, owner_id, turn_ids, lease_expires_at):
        owned = await renew(self, owner_id, turn_ids, lease_expires_at)
        leases.held.discard(ending)  # finish() drops the turn first, then marks it done
        leases.held.add("opened-meanwhile")
        return owned - {ending}

    TurnRepository.renew = renew_while_turns_change
    try:
        with caplog.at_level(logging.WARNING, logger="conversation_service.turns.leases"):
            await leases.renew()
    finally:
        TurnRepository.renew = renew
    assert [r.lost for r in caplog.records if r.getMessage() == "turn leases lost"] == [1]


async def test_a_renewal_is_on_time_while_every_connection_of_the_requests_pool_is_busy(
    database_url: str,
) -> None:
    """The renewal and the sweep have a pool of their own on PostgreSQL: at 100 turns starting at
    once a renewal on the shared pool waited 13.6 s for a connection and the leases of running
    turns ran out (the process took its own turns over and sent their replies twice)."""
    engine = create_engine(database_url, pool_size=1)  # two connections with the overflow
    await migrate.upgrade(engine)
    lease_engine = create_lease_engine(database_url)
    sessionmaker = create_sessionmaker(engine)
    keeper = create_sessionmaker(lease_engine) if lease_engine is not None else sessionmaker
    try:
        leases = TurnLeases(sessionmaker, lease_s=30, keeper_sessionmaker=keeper)
        turn_id = await _accepted_message(sessionmaker, leases)
        leases.held.add(turn_id)
        before = (await _turn(sessionmaker, turn_id)).lease_expires_at
        if lease_engine is None:
            await leases.renew()  # SQLite: one writer at a time, through the one engine's gate
        else:
            async with engine.connect(), engine.connect():  # every connection taken by requests
                await asyncio.wait_for(leases.renew(), 5)
                assert await asyncio.wait_for(leases.claim_expired(10), 5) == []
        assert (await _turn(sessionmaker, turn_id)).lease_expires_at > before
    finally:
        if lease_engine is not None:
            await lease_engine.dispose()
        await engine.dispose()


async def test_a_replica_never_takes_over_its_own_turn_whose_renewal_is_late(sessionmaker) -> None:
    """Starved of CPU (100 turns streaming on a loaded machine), a replica's renewal came 7-20 s
    apart and its own sweep took over the turns it was still answering: their replies went out
    twice. Its own turns are left to it; another replica takes them over once their lease ran out."""
    late = TurnLeases(sessionmaker, lease_s=30)
    turn_id = await _accepted_message(sessionmaker, late)
    late.held.add(turn_id)
    async with transaction(sessionmaker) as session:  # the renewal is a lease late
        (await TurnRepository(session).get(turn_id)).lease_expires_at = utcnow() - timedelta(seconds=1)
    assert await late.claim_expired(10) == []
    assert (await _turn(sessionmaker, turn_id)).takeovers == 0
    other = TurnLeases(sessionmaker, lease_s=30)
    assert [t.id for t in await other.claim_expired(10)] == [turn_id]
    assert (await _turn(sessionmaker, turn_id)).owner_id == other.replica_id
