"""Reading a session's status and cancelling its run."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import async_sessionmaker

from agent_service.errors import NothingToCancel, SessionNotFound
from agent_service.runs.engine import RunState, close_pending_calls
from agent_service.runs.event_log import EventLog
from agent_service.runs.service import RunManager, run_error
from agent_service.sessions.repository import SessionRepository
from shared.protocol import (
    ErrorCode,
    EventType,
    PendingQuestion,
    SessionStatus,
    SessionStatusResponse,
    utcnow,
)


class SessionService:
    def __init__(self, *, sessionmaker: async_sessionmaker, manager: RunManager, event_log: EventLog) -> None:
        self._sessionmaker = sessionmaker
        self._manager = manager
        self._log = event_log

    async def status(self, session_id: str) -> SessionStatusResponse:
        async with self._sessionmaker() as db:
            session = await SessionRepository(db).get(session_id)
        if session is None:
            raise SessionNotFound(f"no session {session_id!r}")
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

    async def ensure_session(self, session_id: str) -> None:
        async with self._sessionmaker() as db:
            if await SessionRepository(db).get(session_id) is None:
                raise SessionNotFound(f"no session {session_id!r}")

    async def cancel(self, session_id: str) -> SessionStatusResponse:
        if await self._manager.cancel(session_id):
            return await self.status(session_id)
        async with self._sessionmaker.begin() as db:
            sessions = SessionRepository(db)
            session = await sessions.get_for_update(session_id)
            if session is None:
                raise SessionNotFound(f"no session {session_id!r}")
            if session.status == SessionStatus.ACTIVE.value:
                raise NothingToCancel("the run is executing in another process of the service; cancel it there")
            if session.status != SessionStatus.AWAITING_USER.value:
                raise NothingToCancel(f"session is {session.status}; there is nothing to cancel")
            state = RunState.from_json(session.transcript, session.run_state)
            close_pending_calls(state, "the user cancelled the run")
            await self._log.append_direct(
                db, session_id, session.current_run_id or "cancel", session.last_seq + 1, EventType.ERROR,
                run_error(ErrorCode.CANCELLED, "the run was cancelled"),
            )
            await sessions.update(
                session_id, status=SessionStatus.CANCELLED.value, pending_question=None, run_state=None,
                transcript=[m.to_dict() for m in state.transcript], updated_at=utcnow(),
            )
        return await self.status(session_id)
