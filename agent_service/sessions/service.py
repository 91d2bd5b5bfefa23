"""Reading a session's status and cancelling its run.

A cancel of a run this process executes interrupts it at once. A run executing in another replica
is cancelled through the database: the request is recorded on the run, its owner notices at its
next lease renewal and cancels it (or, if the owner is gone, recovery ends it as CANCELLED).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import async_sessionmaker

from agent_service.access.caller import Caller
from agent_service.errors import NothingToCancel, SessionNotFound
from agent_service.events.event_log import EventLog
from agent_service.models import AgentSession, owner_of
from agent_service.repository import RunRepository, SessionRepository
from agent_service.runs.endings import CANCELLED, end_with_error
from agent_service.runs.manager import RunManager
from agent_service.settings import AgentServiceSettings
from shared.protocol import ErrorCode, PendingQuestion, SessionStatus, SessionStatusResponse, utcnow
from shared.transactions import transaction


@dataclass(frozen=True, slots=True)
class CancelResult:
    status: SessionStatusResponse
    # False: recorded for the replica executing the run, which had not ended it yet.
    done: bool


class SessionService:
    def __init__(
        self, *, settings: AgentServiceSettings, sessionmaker: async_sessionmaker, manager: RunManager,
        event_log: EventLog,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._manager = manager
        self._log = event_log
        # The owner acts on a cancel at its next renewal; wait that long plus time to end the run
        # (at least a second, so a busy database does not turn it into a 202).
        self._remote_cancel_wait = settings.lease_renew_seconds + max(settings.lease_renew_seconds, 1.0)
        self._poll = settings.replay_poll_seconds

    async def status(self, session_id: str, caller: Caller) -> SessionStatusResponse:
        async with self._sessionmaker() as db:
            session = _visible(await SessionRepository(db).get(session_id), session_id, caller)
        last_seq = session.last_seq
        channel = self._log.channel(session_id)
        if channel is not None:
            # The log may lag the live run by one group-commit interval.
            last_seq = max(last_seq, channel.last_seq)
        pending = session.pending_question
        return SessionStatusResponse(
            session_id=session.id, profile_name=session.profile_name, status=SessionStatus(session.status),
            pending_question=PendingQuestion.model_validate(pending) if pending else None, last_seq=last_seq,
            current_run_id=session.current_run_id, created_at=session.created_at, updated_at=session.updated_at,
        )

    async def ensure_session(self, session_id: str, caller: Caller) -> None:
        """``SessionNotFound`` unless the session exists and ``caller`` may see it."""
        async with self._sessionmaker() as db:
            _visible(await SessionRepository(db).get(session_id), session_id, caller)

    async def cancel(self, session_id: str, caller: Caller) -> CancelResult:
        await self.ensure_session(session_id, caller)
        if await self._manager.cancel(session_id):
            return CancelResult(await self.status(session_id, caller), done=True)
        async with transaction(self._sessionmaker) as db:
            sessions = SessionRepository(db)
            session = _visible(await sessions.get_for_update(session_id), session_id, caller)
            if session.status == SessionStatus.ACTIVE.value:
                if session.current_run_id is None or not await RunRepository(db).request_cancel(
                    session.current_run_id, utcnow()
                ):
                    raise NothingToCancel("the session's run is ending; there is nothing left to cancel")
                remote = True
            elif session.status != SessionStatus.AWAITING_USER.value:
                raise NothingToCancel(f"session is {session.status}; there is nothing to cancel")
            else:
                remote = False
                await end_with_error(
                    db, self._log, session, session.current_run_id or "cancel", ErrorCode.CANCELLED, CANCELLED,
                    now=utcnow(), close_calls="the user cancelled the run",
                )
        if remote:
            return await self._await_remote_cancel(session_id, caller)
        return CancelResult(await self.status(session_id, caller), done=True)

    async def _await_remote_cancel(self, session_id: str, caller: Caller) -> CancelResult:
        """Wait (bounded) for the owning replica to end the run, so that the usual answer, the
        final status, is given whenever the owner is alive; else answer that it is under way."""
        deadline = time.monotonic() + self._remote_cancel_wait
        while True:
            status = await self.status(session_id, caller)
            if status.status is not SessionStatus.ACTIVE:
                return CancelResult(status, done=True)
            if time.monotonic() >= deadline:
                return CancelResult(status, done=False)
            # Polling: the owner is another process, and the database is all the replicas share.
            await asyncio.sleep(min(self._poll, max(deadline - time.monotonic(), 0)))


def _visible(session: AgentSession | None, session_id: str, caller: Caller) -> AgentSession:
    """The session, if there is one and ``caller`` may see it; else not found, the same answer whether
    it does not exist or is another's."""
    if session is None or not caller.may_see(owner_of(session)):
        raise SessionNotFound(f"no session {session_id!r}")
    return session
