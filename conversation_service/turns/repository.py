from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import func, or_, select, update

from conversation_service.db.models import Turn, TurnKind, TurnStatus, utcnow
from conversation_service.db.repository import Repository


class TurnRepository(Repository):
    async def open(
        self, turn_id: str, conversation_id: str, *, owner_id: str, lease_expires_at: datetime,
        traceparent: str | None = None,
    ) -> Turn:
        now = utcnow()
        turn = Turn(id=turn_id, conversation_id=conversation_id, status=TurnStatus.RUNNING.value, owner_id=owner_id,
                    lease_expires_at=lease_expires_at, created_at=now, updated_at=now, traceparent=traceparent)
        self.session.add(turn)
        await self.session.flush()
        return turn

    async def get(self, turn_id: str) -> Turn | None:
        return await self.session.get(Turn, turn_id)

    async def of_reply(self, conversation_id: str, message_id: str) -> Turn | None:
        """The turn whose reply is ``message_id`` (its assistant message)."""
        return await self.session.scalar(
            select(Turn).where(Turn.conversation_id == conversation_id, Turn.assistant_message_id == message_id)
        )

    async def set_direct_reply(self, turn_id: str, message_id: str) -> None:
        await self.session.execute(
            update(Turn).where(Turn.id == turn_id)
            .values(kind=TurnKind.DIRECT.value, assistant_message_id=message_id, updated_at=utcnow())
        )

    async def finish(self, turn_id: str) -> None:
        await self.session.execute(
            update(Turn).where(Turn.id == turn_id)
            .values(status=TurnStatus.DONE.value, owner_id=None, lease_expires_at=None, updated_at=utcnow())
        )

    async def request_stop(self, turn_id: str, now: datetime) -> bool:
        """Flag a running turn's reply to be stopped; False when the turn is not running. A second
        request keeps the first one's time."""
        result = await self.session.execute(
            update(Turn).where(Turn.id == turn_id, Turn.status == TurnStatus.RUNNING.value)
            .values(stop_requested_at=func.coalesce(Turn.stop_requested_at, now), updated_at=now)
        )
        return bool(result.rowcount)

    async def stop_requested(self, owner_id: str, turn_ids: Collection[str]) -> list[str]:
        """Which of this owner's running turns among ``turn_ids`` the user asked to stop."""
        result = await self.session.scalars(
            select(Turn.id).where(Turn.id.in_(list(turn_ids)), Turn.owner_id == owner_id,
                                  Turn.status == TurnStatus.RUNNING.value, Turn.stop_requested_at.is_not(None))
        )
        return list(result.all())

    async def running_in(self, conversation_id: str) -> bool:
        """Whether a reply of the conversation is under way."""
        found = await self.session.scalar(
            select(Turn.id).where(Turn.conversation_id == conversation_id, Turn.status == TurnStatus.RUNNING.value)
            .limit(1)
        )
        return found is not None

    async def reopen(
        self, turn_id: str, *, owner_id: str, lease_expires_at: datetime, traceparent: str | None = None,
    ) -> bool:
        """A done turn runs again, for a new reply to the same message (regenerate): owned by
        ``owner_id``, with nothing of the earlier reply. False when it is not done (a concurrent
        regenerate won, or the reply still runs)."""
        now = utcnow()
        result = await self.session.execute(
            update(Turn).where(Turn.id == turn_id, Turn.status == TurnStatus.DONE.value)
            .values(status=TurnStatus.RUNNING.value, owner_id=owner_id, lease_expires_at=lease_expires_at,
                    kind=None, assistant_message_id=None, agent_session_id=None, agent_session_row_id=None,
                    last_agent_seq=0, takeovers=0, stop_requested_at=None, traceparent=traceparent, updated_at=now)
        )
        return bool(result.rowcount)

    async def renew(self, owner_id: str, turn_ids: Collection[str], lease_expires_at: datetime) -> set[str]:
        """Extend this owner's running turns among ``turn_ids``; the ids it still owns."""
        result = await self.session.execute(
            update(Turn)
            .where(Turn.id.in_(list(turn_ids)), Turn.owner_id == owner_id, Turn.status == TurnStatus.RUNNING.value)
            .values(lease_expires_at=lease_expires_at)
            .returning(Turn.id)
        )
        return set(result.scalars())

    async def release(self, owner_id: str, now: datetime) -> int:
        """Expire this owner's running turns now: the next sweep of any replica takes them over."""
        result = await self.session.execute(
            update(Turn).where(Turn.owner_id == owner_id, Turn.status == TurnStatus.RUNNING.value)
            .values(lease_expires_at=now)
        )
        return result.rowcount or 0

    async def claim_expired(
        self, owner_id: str, now: datetime, lease_expires_at: datetime, limit: int, abandoned: Collection[str] = (),
    ) -> list[Turn]:
        """Running turns of other owners whose lease ran out, now owned by ``owner_id``; of its own
        turns, only the ``abandoned`` ones (given up here: ``TurnLeftRunning``).

        A replica's own turns are running or ending in it (its id is new each start): its renewal
        is merely late, as it is when the process is starved of CPU, and taking them over would
        send their replies twice. ``FOR UPDATE SKIP LOCKED`` on PostgreSQL splits them between
        replicas sweeping at once; SQLite has one writer at a time. The conditional update makes
        the claim exact on both.
        """
        others = Turn.owner_id.is_distinct_from(owner_id)
        # Nearly always empty: then the query is the plain one.
        claimable = or_(others, Turn.id.in_(tuple(abandoned))) if abandoned else others
        expired = (Turn.status == TurnStatus.RUNNING.value, Turn.lease_expires_at <= now, claimable)
        candidates = (await self.session.scalars(
            select(Turn)
            .where(*expired)
            .order_by(Turn.lease_expires_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )).all()
        claimed = []
        for turn in candidates:
            result = await self.session.execute(
                update(Turn)
                .where(Turn.id == turn.id, *expired)
                .values(owner_id=owner_id, lease_expires_at=lease_expires_at, takeovers=Turn.takeovers + 1,
                        updated_at=now)
                .execution_options(synchronize_session=False)
            )
            if result.rowcount:
                claimed.append(turn.id)
        if not claimed:
            return []
        result = await self.session.scalars(
            select(Turn).where(Turn.id.in_(claimed)).execution_options(populate_existing=True)
        )
        return list(result.all())
