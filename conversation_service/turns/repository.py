from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import select, update

from conversation_service.db.models import Turn, TurnKind, TurnStatus, utcnow
from conversation_service.db.repository import Repository


class TurnRepository(Repository):
    async def open(self, turn_id: str, conversation_id: str, *, owner_id: str, lease_expires_at: datetime) -> Turn:
        now = utcnow()
        turn = Turn(id=turn_id, conversation_id=conversation_id, status=TurnStatus.RUNNING.value, owner_id=owner_id,
                    lease_expires_at=lease_expires_at, created_at=now, updated_at=now)
        self.session.add(turn)
        await self.session.flush()
        return turn

    async def get(self, turn_id: str) -> Turn | None:
        return await self.session.get(Turn, turn_id)

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

    async def renew(self, owner_id: str, turn_ids: Collection[str], lease_expires_at: datetime) -> int:
        """Extend this owner's running turns among ``turn_ids``; how many it still owns."""
        result = await self.session.execute(
            update(Turn)
            .where(Turn.id.in_(list(turn_ids)), Turn.owner_id == owner_id, Turn.status == TurnStatus.RUNNING.value)
            .values(lease_expires_at=lease_expires_at)
        )
        return result.rowcount or 0

    async def release(self, owner_id: str, now: datetime) -> int:
        """Expire this owner's running turns now: the next sweep of any replica takes them over."""
        result = await self.session.execute(
            update(Turn).where(Turn.owner_id == owner_id, Turn.status == TurnStatus.RUNNING.value)
            .values(lease_expires_at=now)
        )
        return result.rowcount or 0

    async def claim_expired(self, owner_id: str, now: datetime, lease_expires_at: datetime, limit: int) -> list[Turn]:
        """Running turns whose lease ran out, now owned by ``owner_id``.

        ``FOR UPDATE SKIP LOCKED`` on PostgreSQL splits them between replicas sweeping at once;
        SQLite has one writer at a time. The conditional update makes the claim exact on both.
        """
        candidates = (await self.session.scalars(
            select(Turn)
            .where(Turn.status == TurnStatus.RUNNING.value, Turn.lease_expires_at <= now)
            .order_by(Turn.lease_expires_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )).all()
        claimed = []
        for turn in candidates:
            result = await self.session.execute(
                update(Turn)
                .where(Turn.id == turn.id, Turn.status == TurnStatus.RUNNING.value, Turn.lease_expires_at <= now)
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
