"""SQL of agent delegation's dead letters: delegations that failed, kept to analyse or replay."""

from __future__ import annotations

from typing import Any

from conversation_service.db.models import DeadLetter
from conversation_service.db.repository import Repository


class DeadLetterRepository(Repository):
    async def add(
        self,
        *,
        conversation_id: str,
        message_id: str | None,
        agent_session_id: str | None,
        error_code: str,
        error_detail: str,
        payload: dict[str, Any] | None,
        attempts: int,
    ) -> DeadLetter:
        letter = DeadLetter(
            conversation_id=conversation_id, message_id=message_id, agent_session_id=agent_session_id,
            error_code=error_code, error_detail=error_detail[:2000], payload=payload, attempts=attempts,
        )
        self.session.add(letter)
        await self.session.flush()
        return letter
