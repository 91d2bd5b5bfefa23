"""The SQL of the page's sessions (``auth_sessions``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, or_, update

from conversation_service.db.models import WebSession
from conversation_service.db.repository import Repository


class WebSessionRepository(Repository):
    async def get(self, session_id: str) -> WebSession | None:
        return await self.session.get(WebSession, session_id, populate_existing=True)

    async def add(self, row: WebSession) -> None:
        self.session.add(row)
        await self.session.flush()

    async def claim_refresh(self, session_id: str, now: datetime, until: datetime) -> bool:
        """Take the right to refresh this session's tokens until ``until``; False when another holds it."""
        result = await self.session.execute(
            update(WebSession)
            .where(WebSession.id == session_id,
                   or_(WebSession.refreshing_until.is_(None), WebSession.refreshing_until < now))
            .values(refreshing_until=until)
        )
        return result.rowcount == 1

    async def store_refreshed(self, session_id: str, **values: object) -> None:
        await self.session.execute(
            update(WebSession).where(WebSession.id == session_id).values(refreshing_until=None, **values)
        )

    async def release_refresh(self, session_id: str) -> None:
        await self.session.execute(update(WebSession).where(WebSession.id == session_id).values(refreshing_until=None))

    async def remove(self, session_id: str) -> None:
        await self.session.execute(delete(WebSession).where(WebSession.id == session_id))

    async def remove_expired(self, now: datetime) -> int:
        result = await self.session.execute(delete(WebSession).where(WebSession.expires_at <= now))
        return result.rowcount or 0
