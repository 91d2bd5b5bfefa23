from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from shared.protocol import MAX_CONTENT_CHARS, MAX_ID_CHARS


class AgentAnswerIn(BaseModel):
    """Body of ``POST /conversations/{id}/agent-answer``."""

    model_config = ConfigDict(extra="forbid")

    question_id: Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]
    answer: Annotated[str, Field(max_length=MAX_CONTENT_CHARS)] = ""
    # For an approval question: true runs the tool, false refuses it. Without it, the answer text
    # decides ("approve"/"yes" approve, anything else refuses).
    approved: bool | None = None


class AgentAnswerAccepted(BaseModel):
    message_id: str
    conversation_id: str
    question_id: str


class PendingQuestionOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    question_id: str
    question: str
    kind: str
    tool: str | None = None
    args: dict[str, Any] | None = None
    asked_at: datetime
    expires_at: datetime


class AgentSessionOut(BaseModel):
    """Body of ``GET /conversations/{id}/agent-session``."""

    model_config = ConfigDict(from_attributes=True)

    conversation_id: str
    id: str | None = None
    agent_session_id: str | None = None
    profile_name: str | None = None
    status: str | None = None
    created_at: datetime | None = None
    last_interaction_at: datetime | None = None
    pending_question: PendingQuestionOut | None = None


class AgentQuestionOut(PendingQuestionOut):
    """One question (or tool approval) the agent asked in a conversation, and where it stands."""

    # PENDING (waiting for its answer), ANSWERED, or EXPIRED (also a pending one past its expiry
    # that the cleanup job has not marked yet: it can no longer be answered).
    status: str
    answered_at: datetime | None = None
    # The user message that answered it: on the question's card, in the composer, or elsewhere.
    answer_message_id: str | None = None


class AgentQuestionList(BaseModel):
    """Body of ``GET /conversations/{id}/agent-questions``."""

    items: list[AgentQuestionOut]
    limit: int
