"""How a run ends.

A run this process executes ends with its outcome: ``ending_of`` says what that leaves behind (the
terminal event, the run's status, the session's new state), which the run manager writes in one
transaction. A run no task executes any more (a paused run cancelled or expired, an orphan of a
stopped replica) ends through ``end_with_error``, the one place that writes such an end: above the
session's seq reservation, so never at a seq the run may have shown before it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession

from agent_service.errors import RUN_ERROR_RETRYABLE
from agent_service.events.event_log import EventLog
from agent_service.models import AgentSession, next_seq
from agent_service.repository import SessionRepository
from agent_service.runs.state import Completed, Outcome, Paused, RunState, close_pending_calls
from shared.protocol import AskUserData, CompleteData, ErrorCode, ErrorData, EventType, SessionStatus

CANCELLED = "the run was cancelled"
INTERRUPTED = "the service stopped while the run was executing"


def run_error(code: ErrorCode, message: str, retry_after_s: float | None = None) -> ErrorData:
    return ErrorData(
        code=code.value, message=message, retryable=RUN_ERROR_RETRYABLE.get(code, False), retry_after_s=retry_after_s,
    )


def ended_status(code: ErrorCode) -> SessionStatus:
    """The status an ERROR ``code`` leaves the run and its session in."""
    return SessionStatus.CANCELLED if code is ErrorCode.CANCELLED else SessionStatus.FAILED


@dataclass(frozen=True, slots=True)
class Ending:
    event: EventType
    data: BaseModel
    status: SessionStatus
    transcript: list[dict[str, Any]]
    run_state: dict[str, Any] | None = None
    pending_question: dict[str, Any] | None = None
    error_code: str | None = None

    def session_values(self) -> dict[str, Any]:
        return {
            "status": self.status.value, "transcript": self.transcript, "run_state": self.run_state,
            "pending_question": self.pending_question,
        }


def ending_of(outcome: Outcome, state: RunState, start_transcript: list[dict[str, Any]]) -> Ending:
    """A completed or paused run leaves its transcript on the session (a paused one also where it
    stands and its question); a failed one leaves the transcript it started from."""
    if isinstance(outcome, Completed):
        data = CompleteData(answer=outcome.answer, usage=outcome.usage, direct=outcome.direct)
        return Ending(EventType.COMPLETE, data, SessionStatus.COMPLETED, state.transcript_json())
    if isinstance(outcome, Paused):
        q = outcome.question
        data = AskUserData(
            question_id=q.question_id, question=q.question, expires_at=q.expires_at, kind=q.kind, tool=q.tool,
            args=q.args,
        )
        return Ending(
            EventType.ASK_USER, data, SessionStatus.AWAITING_USER, state.transcript_json(), run_state=state.to_json(),
            pending_question=q.model_dump(mode="json") | {"call_id": outcome.call_id},
        )
    data = run_error(outcome.code, outcome.message, outcome.retry_after_s)
    return Ending(EventType.ERROR, data, ended_status(outcome.code), start_transcript, error_code=outcome.code.value)


async def end_with_error(
    db: AsyncSession, event_log: EventLog, session: AgentSession, run_id: str, code: ErrorCode, message: str, *,
    now: datetime, close_calls: str | None = None,
) -> None:
    """End the run of ``session`` (read for update in ``db``) with an ERROR event at the session's
    next seq (above every seq its run may have shown), in the caller's transaction. ``close_calls``:
    the reason the paused run's pending tool calls are answered with, so that the transcript stays
    valid for the session's next run."""
    values: dict[str, Any] = {
        "status": ended_status(code).value, "run_state": None, "pending_question": None, "updated_at": now,
    }
    # The reservation ends here: every seq below is either in the log or a hole no run will fill.
    values["last_seq"] = values["seq_reserved"] = next_seq(session)
    if close_calls is not None:
        state = RunState.from_json(session.transcript, session.run_state)
        close_pending_calls(state, close_calls)
        values["transcript"] = state.transcript_json()
    await event_log.append_direct(db, session.id, run_id, values["last_seq"], EventType.ERROR, run_error(code, message))
    await SessionRepository(db).set(session, **values)
