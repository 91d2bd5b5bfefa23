"""The ASK_USER cleanup job (spec Risk 3): expire unanswered questions, abandon their sessions.

Runs in every replica. Each pass claims due questions with ``FOR UPDATE SKIP LOCKED`` (on
PostgreSQL), so replicas running at the same moment split the rows between them and every
expired question is handled, and its user notified, exactly once.
"""

from __future__ import annotations

import asyncio
import logging

from conversation_service.agent_delegation.service import AgentDelegation
from shared.protocol import utcnow

log = logging.getLogger(__name__)


class QuestionExpiryJob:
    def __init__(self, delegation: AgentDelegation, *, interval_s: float, batch: int) -> None:
        self._delegation = delegation
        self._interval = interval_s
        self._batch = batch
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def run_once(self) -> list[str]:
        """Expire every question due now; returns the ids this worker handled."""
        handled: list[str] = []
        while True:
            batch = await self._delegation.expire_due(utcnow(), self._batch)
            handled.extend(batch)
            if len(batch) < self._batch:
                return handled

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="ask-user-expiry")

    async def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                handled = await self.run_once()
                if handled:
                    log.info("expired agent questions", extra={"count": len(handled)})
            except Exception:
                log.exception("question expiry pass failed")
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=self._interval)
            except TimeoutError:
                pass

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
