"""ORM models of the ConversationService database.

The schema is owned by the Alembic revisions in ``migrations/conversation``: ``c0001`` (chat:
conversations, messages, conversation_frames), ``c0002`` (agent integration, which extends the
chat schema without replacing it), ``c0003`` (crash safety: reserved frame seqs, leased turns),
``c0004`` (dead-letter replays), ``c0006`` (``conversations.deleted_at``) and ``c0007_reply_control``
(stopped and replaced replies), ``c0009_auth_sessions`` (the page's sign-in sessions) and
``c0010_a2a_agents`` (an A2A agent as a conversation's agent). These models mirror those revisions; a
test compares them.

Relationships are ``lazy="raise"``: a hidden lazy load would block the event loop on an async
session, so every relationship a query needs is loaded explicitly (``selectinload``) or not at all.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from shared.db import UTCDateTime
from shared.protocol import utcnow

ID_LENGTH = 36  # a UUID in its canonical text form
EXTERNAL_ID_LENGTH = 128  # ids minted elsewhere (users, orgs, agent sessions): shared.protocol.MAX_ID_CHARS

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s",
    "pk": "pk_%(table_name)s",
}


def new_id() -> str:
    return str(uuid.uuid4())


# JSON on SQLite, JSONB on PostgreSQL (indexable, compact).
JSONType = JSON().with_variant(JSONB(), "postgresql")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class MessageRole(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"


class MessageStatus(StrEnum):
    COMPLETE = "complete"
    STREAMING = "streaming"
    ERROR = "error"
    # c0007: the user stopped the reply (its text so far kept), or asked for another answer in its
    # place (kept in the history, out of every prompt and off the page).
    STOPPED = "stopped"
    REPLACED = "replaced"


class AgentSessionStatus(StrEnum):
    """Status of a conversation's agent session (spec Story 2, plus ABANDONED for stale ones)."""

    ACTIVE = "ACTIVE"
    AWAITING_USER = "AWAITING_USER"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    ABANDONED = "ABANDONED"


# At most one row per conversation may be in one of these (partial unique index).
NON_TERMINAL_AGENT_SESSION_STATUSES = (AgentSessionStatus.ACTIVE, AgentSessionStatus.AWAITING_USER)
_NON_TERMINAL_SQL = "status IN ('ACTIVE', 'AWAITING_USER')"


class InteractionKind(StrEnum):
    QUESTION = "question"
    APPROVAL = "approval"


class InteractionStatus(StrEnum):
    PENDING = "PENDING"
    ANSWERED = "ANSWERED"
    EXPIRED = "EXPIRED"


def _in(column: str, enum: type[StrEnum]) -> str:
    return f"{column} IN ({', '.join(repr(m.value) for m in enum)})"


def _conversation_id(**options: Any) -> Mapped[str]:
    # A row of a conversation goes when the conversation's row does.
    return mapped_column(String(ID_LENGTH), ForeignKey("conversations.id", ondelete="CASCADE"), **options)


# --- c0001: chat ---------------------------------------------------------------------------------


class Conversation(Base):
    __tablename__ = "conversations"

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True, default=new_id)
    owner_id: Mapped[str] = mapped_column(String(EXTERNAL_ID_LENGTH), index=True)
    org_id: Mapped[str | None] = mapped_column(String(EXTERNAL_ID_LENGTH))
    title: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # Highest frame seq flushed to conversation_frames; the seq allocator starts above it.
    last_seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # c0002: a short status of the conversation's agent work (e.g. "thinking", "awaiting_user").
    agent_status: Mapped[str | None] = mapped_column(String(32))
    # c0006: set when the owner deleted it; every read of a deleted conversation answers 404.
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # c0003: the highest seq any replica may have handed out (``realtime.reservations``); a seq
    # beyond it is reserved here first, so after a crash new frames start above it.
    seq_reserved: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # c0008: the highest seq a replica took from the reservation while Redis was away; a Redis
    # counter below it is raised above it before it hands out another seq.
    seq_without_redis: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")

    messages: Mapped[list[Message]] = relationship(
        back_populates="conversation", lazy="raise", cascade="all, delete-orphan", passive_deletes=True
    )


class Message(Base):
    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("conversation_id", "client_message_id"),
        CheckConstraint(_in("role", MessageRole), name="role"),
        CheckConstraint(_in("status", MessageStatus), name="status"),
        Index("ix_messages_conversation_id_created_at", "conversation_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True, default=new_id)
    conversation_id: Mapped[str] = _conversation_id(index=True)
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str] = mapped_column(Text, default="")
    status: Mapped[str] = mapped_column(String(16), default=MessageStatus.COMPLETE.value)
    client_message_id: Mapped[str | None] = mapped_column(String(EXTERNAL_ID_LENGTH))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # c0002: which agent session produced (or received) this message, and the agent's metadata:
    # the routing decision, tool statuses, usage. Absent on plain chat messages.
    agent_session_id: Mapped[str | None] = mapped_column(String(EXTERNAL_ID_LENGTH))
    agent_metadata: Mapped[dict[str, Any] | None] = mapped_column(JSONType)

    conversation: Mapped[Conversation] = relationship(back_populates="messages", lazy="raise")


class ConversationFrame(Base):
    """Every WebSocket frame of a conversation, in seq order: what ``?after_seq=N`` replays."""

    __tablename__ = "conversation_frames"

    conversation_id: Mapped[str] = _conversation_id(primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    type: Mapped[str] = mapped_column(String(64))
    data: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


# --- c0002: agent integration --------------------------------------------------------------------


class ConversationAgentSession(Base):
    """Correlation of a conversation with an Agent Service session (spec Story 2)."""

    __tablename__ = "conversation_agent_sessions"
    __table_args__ = (
        CheckConstraint(_in("status", AgentSessionStatus), name="status"),
        Index("ix_conversation_agent_sessions_last_interaction_at", "last_interaction_at"),
        # One non-terminal agent session per conversation: a concurrent second creation fails here.
        Index(
            "uq_conversation_agent_sessions_one_open",
            "conversation_id",
            unique=True,
            postgresql_where=text(_NON_TERMINAL_SQL),
            sqlite_where=text(_NON_TERMINAL_SQL),
        ),
    )

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True, default=new_id)
    conversation_id: Mapped[str] = _conversation_id(index=True)
    # Null until the Agent Service has answered with its session id.
    agent_session_id: Mapped[str | None] = mapped_column(String(EXTERNAL_ID_LENGTH), unique=True)
    profile_name: Mapped[str] = mapped_column(String(EXTERNAL_ID_LENGTH), default="default")
    status: Mapped[str] = mapped_column(String(16), default=AgentSessionStatus.ACTIVE.value)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_interaction_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # Highest Agent Service event seq consumed: the Last-Event-ID to resume the stream from.
    last_event_seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    pending_question_id: Mapped[str | None] = mapped_column(String(EXTERNAL_ID_LENGTH))
    # c0010: the A2A agent (its name in A2A_AGENTS) the conversation talks to; null: the Agent Service.
    # For an A2A agent ``agent_session_id`` is the A2A contextId, and ``a2a_task_id`` the task of the
    # last message (an answer continues it, a stop cancels it, a takeover subscribes to it).
    agent_name: Mapped[str | None] = mapped_column(String(32))
    a2a_task_id: Mapped[str | None] = mapped_column(String(EXTERNAL_ID_LENGTH))

    conversation: Mapped[Conversation] = relationship(lazy="raise")


class PendingInteraction(Base):
    """An ASK_USER question (or tool approval) waiting for the user's answer."""

    __tablename__ = "pending_interactions"
    __table_args__ = (
        CheckConstraint(_in("kind", InteractionKind), name="kind"),
        CheckConstraint(_in("status", InteractionStatus), name="status"),
    )

    question_id: Mapped[str] = mapped_column(String(EXTERNAL_ID_LENGTH), primary_key=True)
    conversation_id: Mapped[str] = _conversation_id(index=True)
    agent_session_row_id: Mapped[str] = mapped_column(
        String(ID_LENGTH), ForeignKey("conversation_agent_sessions.id", ondelete="CASCADE"), index=True
    )
    agent_session_id: Mapped[str] = mapped_column(String(EXTERNAL_ID_LENGTH))
    kind: Mapped[str] = mapped_column(String(16), default=InteractionKind.QUESTION.value)
    question: Mapped[str] = mapped_column(Text)
    tool: Mapped[str | None] = mapped_column(String(EXTERNAL_ID_LENGTH))
    args: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    asked_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    status: Mapped[str] = mapped_column(String(16), default=InteractionStatus.PENDING.value)
    answered_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    answer_message_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))


class DeadLetter(Base):
    """A delegation that failed for good, kept for analysis (spec Story 7).

    Plain ids rather than foreign keys: a dead letter outlives the conversation it came from.
    """

    __tablename__ = "dead_letters"

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True, default=new_id)
    conversation_id: Mapped[str] = mapped_column(String(ID_LENGTH), index=True)
    message_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    agent_session_id: Mapped[str | None] = mapped_column(String(EXTERNAL_ID_LENGTH))
    error_code: Mapped[str] = mapped_column(String(64))
    error_detail: Mapped[str] = mapped_column(Text, default="")
    payload: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
    # c0004: an operator's replay (``python -m conversation_service dead-letters replay``). Set when
    # the replay claims the letter, so it is never replayed twice; the outcome once the turn ended
    # (none: under way, or the replaying service stopped before it ended).
    replayed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    replay_outcome: Mapped[str | None] = mapped_column(String(32))
    replay_detail: Mapped[str | None] = mapped_column(Text)


class TurnKind(StrEnum):
    AGENT = "agent"
    DIRECT = "direct"


class TurnStatus(StrEnum):
    RUNNING = "running"
    DONE = "done"


class Turn(Base):
    """c0003: the reply to one accepted message, owned by one replica under a lease.

    The id is the user message's. The owner renews the lease while the reply runs; a turn still
    ``running`` after its lease ran out lost its owner and is taken over (``turns.takeover``).
    """

    __tablename__ = "turns"
    __table_args__ = (
        CheckConstraint(_in("kind", TurnKind), name="kind"),
        CheckConstraint(_in("status", TurnStatus), name="status"),
        Index("ix_turns_status_lease_expires_at", "status", "lease_expires_at"),
    )

    id: Mapped[str] = mapped_column(String(ID_LENGTH), primary_key=True)
    conversation_id: Mapped[str] = _conversation_id(index=True)
    kind: Mapped[str | None] = mapped_column(String(16))  # null until the message is routed
    status: Mapped[str] = mapped_column(String(16), default=TurnStatus.RUNNING.value)
    owner_id: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    assistant_message_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    agent_session_id: Mapped[str | None] = mapped_column(String(EXTERNAL_ID_LENGTH))
    agent_session_row_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    # The Agent Service event seq of the last frame committed for this turn: a takeover resumes
    # the agent's stream after it (written in the same transaction as the frames).
    last_agent_seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    takeovers: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # c0007: the user asked to stop the reply; the replica running it ends it as ``stopped``.
    stop_requested_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # c0011: the W3C traceparent of the accepted message (NULL: tracing off); a takeover links to it.
    traceparent: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ConversationSummary(Base):
    """The cached summary of a conversation's older messages (history compression, Story 3)."""

    __tablename__ = "conversation_summaries"

    conversation_id: Mapped[str] = _conversation_id(primary_key=True)
    covered_message_count: Mapped[int] = mapped_column(Integer, default=0)
    last_covered_message_id: Mapped[str | None] = mapped_column(String(ID_LENGTH))
    summary: Mapped[str] = mapped_column(Text, default="")
    token_count: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)



class WebSession(Base):
    """c0009: a page signed in with the identity provider (``conversation_service.auth.sessions``).

    The id is the SHA-256 of the session cookie (the cookie itself is never stored); the provider's
    tokens are sealed with a key derived from the cookie, so this row alone opens nothing.
    """

    __tablename__ = "auth_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(EXTERNAL_ID_LENGTH))
    org_id: Mapped[str | None] = mapped_column(String(EXTERNAL_ID_LENGTH))
    permissions: Mapped[list[str]] = mapped_column(JSONType, default=list)
    display_name: Mapped[str] = mapped_column(String(200))
    sealed_tokens: Mapped[bytes] = mapped_column(LargeBinary)
    # When the access token expires: the tokens are refreshed shortly before.
    access_expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    # The session's end, whatever happens (AUTH_SESSION_MAX_AGE_S after sign-in).
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    # A replica refreshing the tokens holds this until then, so two never use one refresh token.
    refreshing_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
