"""What an execute may ask, checked before anything is written: the request on its own
(``check_request``), then what it asks of the session as its claim read it (``turn_for``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from agent_service.errors import (
    InvalidRequest,
    MessageTooLarge,
    NotAwaitingUser,
    QuestionMismatch,
    QuestionPending,
)
from agent_service.models import AgentSession
from agent_service.runs.state import Resume
from shared.protocol import Answer, AskUserKind, ExecuteRequest, PendingQuestion, SessionStatus

_APPROVE_WORDS = frozenset({"approve", "approved", "yes", "y", "ok", "allow"})


def check_request(request: ExecuteRequest, idempotency_key: str | None, max_chars: int) -> None:
    if len(request.message) > max_chars:
        raise MessageTooLarge(f"message has {len(request.message)} characters; the limit is {max_chars}")
    if request.answer is not None:
        if request.session_id is None:
            raise InvalidRequest("an answer needs the session_id of the paused session")
        if len(request.answer.text) > max_chars:
            raise MessageTooLarge(f"answer has {len(request.answer.text)} characters; the limit is {max_chars}")
    elif not request.message.strip():
        raise InvalidRequest("message must not be empty (or send an answer)")
    if idempotency_key is not None and not (0 < len(idempotency_key) <= 128 and idempotency_key.isprintable()):
        raise InvalidRequest("Idempotency-Key must be 1 to 128 printable characters")


@dataclass(frozen=True, slots=True)
class Turn:
    """What an execute does with a session no run holds."""

    # The answer to the session's question, which the paused run resumes with.
    resume: Resume | None = None
    # The session's question expired: it is ended first, and an answer to it refused.
    expired: bool = False


def turn_for(session: AgentSession, request: ExecuteRequest, now: datetime) -> Turn:
    pending = session.pending_question
    awaiting = session.status == SessionStatus.AWAITING_USER.value and pending is not None
    if request.answer is not None:
        if not awaiting:
            raise NotAwaitingUser(f"session is {session.status}, not waiting for an answer")
        if pending["question_id"] != request.answer.question_id:
            raise QuestionMismatch(
                {"message": "the answer is for another question", "pending_question_id": pending["question_id"]}
            )
        question = PendingQuestion.model_validate(pending)
        if question.expires_at <= now:
            return Turn(expired=True)
        answer = request.answer
        return Turn(resume=Resume(
            kind=question.kind, text=answer.text, approved=_approved(answer),
            declined=question.kind is AskUserKind.QUESTION and answer.approved is False,
        ))
    if awaiting:
        if PendingQuestion.model_validate(pending).expires_at > now:
            raise QuestionPending(
                {"message": "the session waits for an answer to its question; send it as answer",
                 "question_id": pending["question_id"]}
            )
        return Turn(expired=True)
    return Turn()


def _approved(answer: Answer) -> bool:
    if answer.approved is not None:
        return answer.approved
    return answer.text.strip().lower().rstrip(".!") in _APPROVE_WORDS
