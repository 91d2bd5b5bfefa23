"""The summary cache on the ``conversation_summaries`` table, shared by every replica."""

from __future__ import annotations

import logging
from dataclasses import asdict

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import async_sessionmaker

from conversation_service.db.models import ConversationSummary
from conversation_service.db.repository import Repository
from conversation_service.history.summary_cache import CachedSummary
from shared.transactions import transaction

logger = logging.getLogger(__name__)


def _to_entry(row: ConversationSummary) -> CachedSummary:
    return CachedSummary(
        conversation_id=row.conversation_id,
        summary=row.summary,
        last_covered_message_id=row.last_covered_message_id or "",
        covered_message_count=row.covered_message_count,
        token_count=row.token_count,
        updated_at=row.updated_at,
    )


class SummaryRepository(Repository):
    async def get_for_conversation(self, conversation_id: str) -> CachedSummary | None:
        row = await self.session.scalar(
            select(ConversationSummary).where(ConversationSummary.conversation_id == conversation_id)
        )
        return _to_entry(row) if row is not None else None

    async def upsert(self, entry: CachedSummary) -> None:
        values = asdict(entry)
        dialect = self.session.get_bind().dialect.name
        insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        statement = insert(ConversationSummary).values(**values)
        # Two replicas refreshing the same conversation: the last writer wins, both are valid.
        statement = statement.on_conflict_do_update(
            index_elements=[ConversationSummary.conversation_id],
            set_={key: statement.excluded[key] for key in values if key != "conversation_id"},
        )
        await self.session.execute(statement)
        await self.session.flush()


class DatabaseSummaryCache:
    """``SummaryCache`` on the database. Each operation is its own short unit of work: a cached
    summary is worth keeping even when the request that computed it fails later."""

    def __init__(self, sessionmaker: async_sessionmaker) -> None:
        self._sessionmaker = sessionmaker

    async def get(self, conversation_id: str) -> CachedSummary | None:
        async with transaction(self._sessionmaker) as session:
            return await SummaryRepository(session).get_for_conversation(conversation_id)

    async def put(self, entry: CachedSummary) -> None:
        try:
            async with transaction(self._sessionmaker) as session:
                await SummaryRepository(session).upsert(entry)
        except IntegrityError:
            # The conversation was deleted meanwhile (foreign key): nothing left to cache for.
            logger.info(
                "summary not cached: conversation is gone", extra={"conversation_id": entry.conversation_id}
            )
