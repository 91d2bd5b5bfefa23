"""``TurnLeases``: this replica's ownership of the turns it runs.

Each process is a replica with a fresh id. A turn is opened owned by it (in the transaction that
stores the accepted message), its lease renewed by one UPDATE every ``renew_s`` while the reply
runs in this process, and the turn marked done when the reply has ended. A turn left ``running``
past its lease (its replica died) is claimed by some replica's sweep (``agent_delegation.takeover``).
On a graceful shutdown the leases of the turns left unfinished are released (expired now), so
another replica takes them over at once instead of a lease later.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Coroutine
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from conversation_service.db.models import utcnow
from conversation_service.turns.observe import TurnObserver
from conversation_service.turns.repository import TurnRepository
from conversation_service.turns.stops import ReplyStops
from shared.transactions import Transactions, transaction

log = logging.getLogger(__name__)

T = TypeVar("T")


class TurnLeftRunning(Exception):
    """The reply failed and so did ending it where it ran (its writes failed: the database is down,
    most likely). ``hold`` leaves the turn running, given up here: its lease, no longer renewed,
    runs out and a sweep (``agent_delegation.takeover``, this replica's too) ends the reply; marking
    the turn done would leave the reply streaming for good. The reason is chained."""


class TurnLeases:
    """``keeper_sessionmaker``: for the renewals, the sweep's claims and the release, a pool apart
    from the requests' (``shared.db.create_lease_engine``), so a renewal is never late because
    every connection is busy; the requests' pool by default."""

    def __init__(
        self, sessionmaker: async_sessionmaker, *, lease_s: float, replica_id: str | None = None,
        keeper_sessionmaker: async_sessionmaker | None = None, write_budget_s: float = 30.0,
        observer: TurnObserver | None = None,
    ) -> None:
        self.observer = observer or TurnObserver()
        self._sessionmaker = sessionmaker
        self._tx = Transactions(sessionmaker, budget_s=write_budget_s)
        self._keeper_sessionmaker = keeper_sessionmaker or sessionmaker
        self.lease = timedelta(seconds=lease_s)
        self.replica_id = replica_id or f"replica-{uuid.uuid4().hex[:12]}"
        self.held: set[str] = set()  # turns whose reply runs in this process now
        # Turns given up here (``TurnLeftRunning``), which this replica's sweep may take over too
        # (an id stays if another replica ends it: one per such failure).
        self.abandoned: set[str] = set()
        self.stops = ReplyStops()  # the replies of those that a stop request ends here

    def expires_at(self, now: datetime | None = None) -> datetime:
        return (now or utcnow()) + self.lease

    async def open(self, session: AsyncSession, turn_id: str, conversation_id: str) -> None:
        """In the transaction that accepts the message: from its commit on, the message has an
        owner that answers it, or another replica takes over."""
        # Not in ``held`` yet: the transaction may still roll back; the reply's task (``hold``)
        # starts well within the lease.
        await TurnRepository(session).open(turn_id, conversation_id, owner_id=self.replica_id,
                                           lease_expires_at=self.expires_at(), traceparent=self.observer.traceparent())

    async def reopen(self, session: AsyncSession, turn_id: str, conversation_id: str) -> bool:
        """In the transaction that answers an answered message again (a regenerate, a dead letter's
        replay): its done turn runs again owned here, with nothing of the earlier reply, so the new
        reply has an owner or a takeover like a new message's (opened afresh when the message
        predates turns). False when its turn is still running."""
        turns = TurnRepository(session)
        if await turns.get(turn_id) is None:
            await self.open(session, turn_id, conversation_id)
            return True
        return await turns.reopen(turn_id, owner_id=self.replica_id, lease_expires_at=self.expires_at(),
                                   traceparent=self.observer.traceparent())

    async def hold(
        self, turn_id: str, reply: Coroutine[Any, Any, T], *, linked: str | None = None, takeover: bool = False,
    ) -> T:
        """Run ``reply`` as the turn's owner; the turn is done once it returns, which it does only
        once the reply's end is stored and shown (``replies.ender``). Anything else leaves the turn
        running: cancelled (a shutdown hands it over), or failed (``TurnLeftRunning``, or a fault
        that got no end to the user), it is given up here for a sweep, this replica's too, to end.
        ``linked``: the trace of the message, which a takeover's or a replay's span links to."""
        with self.observer.turn(turn_id, linked=linked, takeover=takeover) as outcome:
            result = await self._hold(turn_id, reply)
            outcome.value = "done"
            return result

    async def _hold(self, turn_id: str, reply: Coroutine[Any, Any, T]) -> T:
        self.held.add(turn_id)
        try:
            result = await reply
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            self.give_up(turn_id)
            if not isinstance(error, TurnLeftRunning):
                log.error("a reply failed without an end; its turn is left to the lease sweep",
                          exc_info=error, extra={"turn_id": turn_id})
            raise
        else:
            await self.finish(turn_id)
            return result
        finally:
            self.held.discard(turn_id)

    def give_up(self, turn_id: str) -> None:
        """Stop renewing the turn here and let this replica's sweep take it over once its lease runs out."""
        self.held.discard(turn_id)
        self.abandoned.add(turn_id)

    async def finish(self, turn_id: str) -> None:
        """Mark the turn done (retried while the database is away; when it cannot be, the turn's lease
        runs out and a sweep finds its reply ended and settles it)."""
        self.held.discard(turn_id)

        async def write(session: AsyncSession) -> None:
            await TurnRepository(session).finish(turn_id)

        try:
            await self._tx.run(write)
        except Exception:
            self.abandoned.add(turn_id)
            log.exception("could not mark a turn done; the lease sweep settles it", extra={"turn_id": turn_id})

    async def request_stop(self, turn_id: str) -> bool:
        """Store the user's stop of a running turn (any replica sees it); False when it is not running."""
        async with transaction(self._sessionmaker) as session:
            return await TurnRepository(session).request_stop(turn_id, utcnow())

    async def renew(self) -> None:
        """The periodic renewal: one UPDATE for every turn this process runs. It also picks up the
        stop requests another replica stored for them (the user's stop reached that one)."""
        if not self.held:
            return
        held = tuple(self.held)
        async with transaction(self._keeper_sessionmaker) as session:
            turns = TurnRepository(session)
            owned = await turns.renew(self.replica_id, held, self.expires_at())
            to_stop = await turns.stop_requested(self.replica_id, held)
        for turn_id in to_stop:
            self.stops.stop(turn_id)
        # Turns that ended or started while the UPDATE ran are not lost: only one still running
        # here that the UPDATE did not find is.
        lost = [turn_id for turn_id in held if turn_id in self.held and turn_id not in owned]
        if lost:
            # Another replica took some over (this one was too slow to renew): say so; the user may
            # see that reply twice.
            log.warning("turn leases lost", extra={"held": len(held), "renewed": len(owned), "lost": len(lost)})

    async def release(self) -> None:
        """Graceful shutdown: the turns left unfinished are free for a takeover at once."""
        async with transaction(self._keeper_sessionmaker) as session:
            released = await TurnRepository(session).release(self.replica_id, utcnow() - timedelta(seconds=1))
        if released:
            log.info("released turn leases for takeover", extra={"turns": released})

    async def claim_expired(self, limit: int) -> list:
        now = utcnow()
        async with transaction(self._keeper_sessionmaker) as session:
            turns = await TurnRepository(session).claim_expired(self.replica_id, now, self.expires_at(now), limit,
                                                                abandoned=self.abandoned)
        self.held.update(t.id for t in turns)
        self.abandoned.difference_update(t.id for t in turns)
        return turns
