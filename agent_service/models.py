"""Tables of the Agent Service database: sessions, their runs, and the durable event log.

A session is the long-lived conversation with the agent (its transcript survives runs and
restarts); a run is one execution of the ReAct loop on it; events are what runs emitted, ordered by
the session's ``seq``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, ForeignKey, Index, Integer, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from agent_service.access.caller import LEGACY_PRINCIPAL, Owner
from shared.db import UTCDateTime


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {datetime: UTCDateTime(), dict[str, Any]: JSON(), list[Any]: JSON()}


class AgentSession(Base):
    __tablename__ = "agent_sessions"
    __table_args__ = (
        Index("ix_agent_sessions_owner_updated", "owner", "updated_at"),
        Index("ix_agent_sessions_user_updated", "org_id", "user_id", "updated_at"),
        Index("ix_agent_sessions_context_id", "context_id"),
    )

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    profile_name: Mapped[str] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(32), index=True)
    user_context: Mapped[dict[str, Any]] = mapped_column(JSON)
    # The LLM transcript (LLMMessage.to_dict() entries): what a resumed run continues from.
    transcript: Mapped[list[Any]] = mapped_column(JSON, default=list)
    # Where a paused run stands: tool calls still to execute, steps and usage so far.
    run_state: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    pending_question: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    last_seq: Mapped[int] = mapped_column(Integer, default=0)
    # The highest seq any process may have shown live (events are published before their group
    # commit): raised by a run's claim, lowered to ``last_seq`` when the run ends normally. An end
    # written for a run that crashed or was taken over goes above it (see ``next_seq``).
    seq_reserved: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    current_run_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    # a0007: the caller that created it (``Caller.principal``) and the user it acts for
    # (``user_context``'s, as columns a list can filter on): who may see it (``access.caller``).
    owner: Mapped[str] = mapped_column(String(160), default=LEGACY_PRINCIPAL, server_default=LEGACY_PRINCIPAL)
    user_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    org_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    # The A2A context id its client chose, where another caller's session had it as its id (a2a.repository).
    context_id: Mapped[str | None] = mapped_column(String(128), nullable=True)


class AgentRun(Base):
    __tablename__ = "agent_runs"
    __table_args__ = (
        Index("ix_agent_runs_session_id", "session_id"),
        Index("ix_agent_runs_status_lease", "status", "lease_expires_at"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("agent_sessions.id", ondelete="CASCADE"))
    # A retried execute carrying the same key joins this run instead of starting another.
    idempotency_key: Mapped[str | None] = mapped_column(String(128), unique=True, nullable=True)
    status: Mapped[str] = mapped_column(String(32))
    # The seq of the run's first event: a joining client replays from here.
    first_seq: Mapped[int] = mapped_column(Integer)
    error_code: Mapped[str | None] = mapped_column(String(64), nullable=True)
    usage: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    started_at: Mapped[datetime]
    ended_at: Mapped[datetime | None] = mapped_column(nullable=True)
    # The process executing the run and until when it vouches for it: replicas share the
    # database, and recovery fails only runs whose owner stopped renewing (NULL: no owner).
    owner_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(nullable=True)
    # A cancel received by a replica that does not run it; the owner acts on it at its next renewal.
    cancel_requested_at: Mapped[datetime | None] = mapped_column(nullable=True)
    # a0006: the W3C traceparent of the request that started the run (NULL: tracing off).
    traceparent: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # a0007: the caller that started it (an answer may come from another caller than the session's).
    owner: Mapped[str] = mapped_column(String(160), default=LEGACY_PRINCIPAL, server_default=LEGACY_PRINCIPAL)
    # a0008: where the run stands at the end of its last step, written with that step's events
    # (``runs.checkpoints``); what a continuation after a crash starts from. NULL: no step ended
    # yet (a run resuming after a question holds the answer here from its claim on).
    checkpoint: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # a0008: how many times the run was continued after its process died (``runs.continuation``).
    continuations: Mapped[int] = mapped_column(Integer, server_default="0")


class AgentEvent(Base):
    __tablename__ = "agent_events"
    __table_args__ = (Index("ix_agent_events_run_id", "run_id"),)

    session_id: Mapped[str] = mapped_column(
        ForeignKey("agent_sessions.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64))
    type: Mapped[str] = mapped_column(String(32))
    ts: Mapped[datetime]
    data: Mapped[dict[str, Any]] = mapped_column(JSON)


def owner_of(session: AgentSession) -> Owner:
    return Owner(principal=session.owner, user_id=session.user_id, org_id=session.org_id)


def next_seq(session: AgentSession) -> int:
    """The first seq no reader of ``session`` can have seen: after the log and after every seq a
    run may have published without writing it (the hole a crash leaves)."""
    return max(session.last_seq, session.seq_reserved or 0) + 1
