"""All SQL of sessions, their runs and the event log. Callers own the transaction; these only flush."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Text, bindparam, case, exists, func, insert, literal, or_, select, text, true, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value

from agent_service.models import AgentEvent, AgentRun, AgentSession
from shared.db import json_dumps, on_postgres
from shared.protocol import EventEnvelope, EventType, SessionStatus

_EVENTS = AgentEvent.__table__
_SESSIONS = AgentSession.__table__
# One statement for every session of a group commit, run as executemany (see bump_last_seqs).
_BUMP_LAST_SEQ = (
    update(_SESSIONS)
    .where(_SESSIONS.c.id == bindparam("b_session_id"), _SESSIONS.c.last_seq < bindparam("b_seq"))
    .values(last_seq=bindparam("b_seq"))
)
# The statements every run executes, built once (one built per call pays for its cache key each time).
_RUNS = AgentRun.__table__
_INSERT_SESSION = insert(_SESSIONS)
_INSERT_RUN = insert(_RUNS)
_FINISH_OWNED = (
    update(_RUNS)
    .where(_RUNS.c.id == bindparam("f_run_id"), _RUNS.c.owner_id == bindparam("f_owner_id"),
           _RUNS.c.status == bindparam("f_active"))
    .values(status=bindparam("f_status"), ended_at=bindparam("f_ended_at"), error_code=bindparam("f_error_code"),
            usage=bindparam("f_usage"))
)
# Bound names never a column's: an UPDATE adds to its SET clause every column named by a parameter.
_CLOSE_LOG = (
    update(_SESSIONS)
    .where(_SESSIONS.c.id == bindparam("c_session_id"))
    .values(seq_reserved=bindparam("c_seq"),
            last_seq=case((_SESSIONS.c.last_seq < bindparam("c_seq"), bindparam("c_seq")), else_=_SESSIONS.c.last_seq))
)


@functools.lru_cache(maxsize=8)
def _close_log_setting(columns: tuple[str, ...]):
    """``_CLOSE_LOG`` also setting ``columns`` (bound as ``c_<column>``): one statement per kind of
    ending, built once."""
    return _CLOSE_LOG.values(**{name: bindparam(f"c_{name}") for name in columns}) if columns else _CLOSE_LOG


_EVENT_COLUMNS = ("session_id", "seq", "run_id", "type", "ts", "data")


@functools.lru_cache(maxsize=16)
def _pg_end_run(columns: tuple[str, ...], notify: bool):
    """PostgreSQL: a run's terminal write in one statement. The run's row is ended only while its
    owner still holds it; the session's row (``_close_log_setting(columns)``) and the event are
    written only if it was, and so is the NOTIFY that tells followers (``notify``: bound as
    ``n_channel`` and ``n_payload``; sent when the statement commits). The run's row is locked
    first, the order recovery locks them in. Returns 1 when written, 0 when the run was no longer
    the owner's (nothing written, nobody told)."""
    run = _FINISH_OWNED.returning(_RUNS.c.id).cte("ended_run")
    owned = exists(select(run.c.id))
    closed = _close_log_setting(columns).where(owned).returning(_SESSIONS.c.id).cte("closed_log")
    row = select(*_bound("e_", _EVENTS, _EVENT_COLUMNS)).where(owned)
    event = insert(_EVENTS).from_select(list(_EVENT_COLUMNS), row).returning(_EVENTS.c.seq).cte("terminal_event")
    ended = run
    if notify:
        # Called once per row of the ended run: once when it was the owner's, never otherwise.
        told = select(func.pg_notify(bindparam("n_channel", type_=Text), bindparam("n_payload", type_=Text))).lateral()
        ended = run.join(told, true())
    # Data-modifying CTEs run to completion whether or not the query reads them.
    return select(func.count()).select_from(ended).add_cte(closed, event)


def _bound(prefix: str, table, columns) -> list:
    """Bound parameters ``<prefix><column>`` typed as ``table``'s columns, as a row to select."""
    return [bindparam(f"{prefix}{name}", type_=table.c[name].type) for name in columns]


@functools.lru_cache(maxsize=8)
def _pg_insert_with_run(session_columns: tuple[str, ...], run_columns: tuple[str, ...]):
    """PostgreSQL: a new session's row and its first run's in one statement (the run's row refers
    to the session's, which the statement inserts first)."""
    new_session = insert(_SESSIONS).from_select(
        list(session_columns), select(*_bound("s_", _SESSIONS, session_columns))
    ).returning(_SESSIONS.c.id).cte("new_session")
    run = select(*_bound("r_", _RUNS, run_columns)).select_from(new_session)
    return insert(_RUNS).from_select(list(run_columns), run).add_cte(new_session)


# Rows per insert statement of a group commit on SQLite (see EventRepository.insert_many).
_INSERT_SLICE = 64

# PostgreSQL: a group commit's rows go as one JSON document the server unpacks, one statement per
# batch. Binding them row by row cost 12.8 us of the service's CPU per event (SQLAlchemy's bind
# processing and asyncpg's encoding of six values per row, on the event loop); serialising the batch
# with orjson costs about 1 us. Each row's data goes as its JSON text in a string, kept as is: unpacked
# as a json field, an escaped NUL (\u0000, valid JSON a tool may return) fails the whole batch.
_PG_INSERT_EVENTS = text(
    "INSERT INTO agent_events (session_id, seq, run_id, type, ts, data) "
    "SELECT session_id, seq, run_id, type, ts, CAST(data AS json) FROM json_to_recordset(CAST(:rows AS json)) "
    "AS e(session_id text, seq integer, run_id text, type text, ts timestamptz, data text)"
)
_PG_BUMP_LAST_SEQS = text(
    "UPDATE agent_sessions SET last_seq = b.seq FROM json_to_recordset(CAST(:seqs AS json)) AS b(id text, seq integer) "
    "WHERE agent_sessions.id = b.id AND agent_sessions.last_seq < b.seq"
)
# A group commit's checkpoints, one statement whatever their number (as the events: one JSON document).
_PG_SAVE_CHECKPOINTS = text(
    "UPDATE agent_runs SET checkpoint = CAST(c.state AS json) "
    "FROM json_to_recordset(CAST(:rows AS json)) AS c(id text, state text) WHERE agent_runs.id = c.id"
)
_SAVE_CHECKPOINT = update(_RUNS).where(_RUNS.c.id == bindparam("k_run_id")).values(checkpoint=bindparam("k_state"))
# One prepared statement whatever the number of runs (an IN list is a new statement per length).
_PG_HELD = text(
    "SELECT id FROM agent_runs WHERE id = ANY(CAST(:ids AS text[])) AND owner_id = :owner AND status = :active"
)


@dataclass(frozen=True, slots=True)
class RunEnd:
    """What the end of a run this process executes records on the run's own row."""

    run_id: str
    owner_id: str
    status: str
    ended_at: datetime
    error_code: str | None = None
    usage: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class HeldLease:
    """A run whose lease this process still holds, as the renewal found it."""

    run_id: str
    cancel_requested_at: datetime | None


@dataclass(frozen=True, slots=True)
class OrphanRun:
    run_id: str
    session_id: str
    cancel_requested_at: datetime | None


@dataclass(frozen=True, slots=True)
class ContinuedRun:
    """An orphaned run this process took over to continue it, as its row stood."""

    run_id: str
    first_seq: int
    checkpoint: dict[str, Any] | None
    # Its continuations, this one included.
    continuations: int
    traceparent: str | None


def _lease_expired(now: datetime):
    # NULL: a run written before leases existed, or whose owner never took one.
    return or_(AgentRun.lease_expires_at.is_(None), AgentRun.lease_expires_at < now)


class SessionRepository:
    def __init__(self, db: AsyncSession) -> None:
        self.db = db

    async def get(self, session_id: str) -> AgentSession | None:
        return await self.db.get(AgentSession, session_id)

    async def get_for_update(self, session_id: str) -> AgentSession | None:
        # Row lock on PostgreSQL; SQLite serialises writers anyway.
        result = await self.db.execute(
            select(AgentSession).where(AgentSession.id == session_id).with_for_update()
        )
        return result.scalar_one_or_none()

    async def insert(self, **values: Any) -> None:
        # A Core insert built once: the ORM's unit of work costs more than the statement itself
        # on this path, which every new conversation's first message takes.
        await self.db.execute(_INSERT_SESSION, values)

    async def insert_with_run(self, session: dict[str, Any], run: dict[str, Any]) -> None:
        """A new session's row and its first run's: one statement on PostgreSQL, two on SQLite."""
        if on_postgres(self.db):
            statement = _pg_insert_with_run(tuple(session), tuple(run))
            await self.db.execute(statement, {f"s_{k}": v for k, v in session.items()} | {f"r_{k}": v for k, v in run.items()})
            return
        await self.insert(**session)
        await RunRepository(self.db).insert(**run)

    async def claim(
        self, session_id: str, run_id: str, now: datetime, values: dict[str, Any], run: dict[str, Any],
    ) -> bool:
        """Mark the session ACTIVE for ``run_id`` unless another run holds it, and write the ``run``'s
        row if it was claimed; True when claimed. One statement on PostgreSQL, two on SQLite."""
        claim = (
            update(AgentSession)
            .where(AgentSession.id == session_id, AgentSession.status != SessionStatus.ACTIVE.value)
            .values(status=SessionStatus.ACTIVE.value, current_run_id=run_id, updated_at=now, **values)
            .execution_options(synchronize_session=False)
        )
        if on_postgres(self.db):
            claimed = claim.returning(_SESSIONS.c.id).cte("claimed")
            result = await self.db.execute(
                insert(_RUNS).from_select(list(run), select(*_bound("r_", _RUNS, run)).select_from(claimed)).add_cte(claimed),
                {f"r_{k}": v for k, v in run.items()},
            )
            return result.rowcount == 1
        if (await self.db.execute(claim)).rowcount != 1:
            return False
        await RunRepository(self.db).insert(**run)
        return True

    async def update(self, session_id: str, **values: Any) -> None:
        await self.db.execute(
            update(AgentSession)
            .where(AgentSession.id == session_id)
            .values(**values)
            .execution_options(synchronize_session=False)
        )

    async def set(self, session: AgentSession, **values: Any) -> None:
        """``update`` a session read in this transaction, and the object read with it (as loaded:
        the ORM does not write it again)."""
        await self.update(session.id, **values)
        for name, value in values.items():
            set_committed_value(session, name, value)

    async def extend_reservation(self, session_id: str, run_id: str, reserved: int) -> bool:
        """Raise the session's ``seq_reserved`` to ``reserved`` while ``run_id`` still runs it;
        False when it does not (the run ended, or another replica ended it)."""
        result = await self.db.execute(
            update(AgentSession)
            .where(
                AgentSession.id == session_id, AgentSession.current_run_id == run_id,
                AgentSession.status == SessionStatus.ACTIVE.value,
            )
            # Only the run itself extends, one extension at a time, each further than the last.
            .values(seq_reserved=reserved)
            .execution_options(synchronize_session=False)
        )
        return result.rowcount == 1

    async def close_reservation(self, session_id: str, run_id: str, seq: int) -> None:
        """Lower the reservation of ``run_id``'s session to ``seq``, every seq up to which is written:
        the run handed over goes on right after it, with no hole."""
        await self.db.execute(
            update(AgentSession)
            .where(AgentSession.id == session_id, AgentSession.current_run_id == run_id,
                   AgentSession.status == SessionStatus.ACTIVE.value, AgentSession.last_seq <= seq)
            .values(seq_reserved=seq)
            .execution_options(synchronize_session=False)
        )

    async def bump_last_seq(self, session_id: str, seq: int) -> None:
        # Never move backwards: batches of one session are written in order, but be safe anyway.
        await self.db.execute(
            update(AgentSession)
            .where(AgentSession.id == session_id, AgentSession.last_seq < seq)
            .values(last_seq=seq)
            .execution_options(synchronize_session=False)
        )

    async def close_log(self, session_id: str, seq: int, **values: Any) -> None:
        """A run's terminal event at ``seq`` is written: the log reaches it (``last_seq``, never
        moved back) and the reservation ends there, in one statement with the session's other
        ``values`` (its state after the run), which would otherwise cost a statement of their own."""
        await self.db.execute(
            _close_log_setting(tuple(values)),
            {"c_session_id": session_id, "c_seq": seq, **{f"c_{name}": value for name, value in values.items()}},
        )

    async def bump_last_seqs(self, last_seqs: Mapping[str, int]) -> None:
        """``bump_last_seq`` for many sessions in one statement (SQLite: one executemany): a group
        commit spans every streaming run, and one statement per session cost a round trip (on SQLite
        a hop to the driver's thread and back) each, per batch."""
        if not last_seqs:
            return
        if on_postgres(self.db):
            seqs = [{"id": session_id, "seq": seq} for session_id, seq in last_seqs.items()]
            await self.db.execute(_PG_BUMP_LAST_SEQS, {"seqs": json_dumps(seqs)})
        else:
            await self.db.execute(
                _BUMP_LAST_SEQ, [{"b_session_id": session_id, "b_seq": seq} for session_id, seq in last_seqs.items()]
            )


class RunRepository:
    def __init__(self, db: AsyncSession) -> None:
        self.db = db

    async def insert(self, **values: Any) -> None:
        await self.db.execute(_INSERT_RUN, values)  # as SessionRepository.insert: every run's claim

    async def traceparent_of(self, run_id: str) -> str | None:
        return await self.db.scalar(select(AgentRun.traceparent).where(AgentRun.id == run_id))

    async def get_by_idempotency_key(self, key: str) -> AgentRun | None:
        result = await self.db.execute(select(AgentRun).where(AgentRun.idempotency_key == key))
        return result.scalar_one_or_none()

    async def end(
        self, end: RunEnd, event: EventEnvelope, session_values: dict[str, Any], notify: tuple[str, str] | None = None,
    ) -> bool:
        """The terminal write of a run this process executes: the run's row, the session's state
        after it with its log closed at the terminal ``event``'s seq (``SessionRepository.close_log``),
        and the event. False, with nothing written, when this process no longer holds the run
        (recovery ended it). One statement on PostgreSQL, which also sends ``notify`` (a NOTIFY's
        channel and payload) when it writes, so that it is atomic alone and needs no transaction
        around it; three on SQLite, which has no data-modifying CTEs (and serialises writers, so
        nothing can come between them)."""
        params = {
            "f_run_id": end.run_id, "f_owner_id": end.owner_id, "f_active": SessionStatus.ACTIVE.value,
            "f_status": end.status, "f_ended_at": end.ended_at, "f_error_code": end.error_code, "f_usage": end.usage,
        }
        if on_postgres(self.db):
            params |= {"c_session_id": event.session_id, "c_seq": event.seq}
            params |= {f"c_{name}": value for name, value in session_values.items()}
            params |= {"e_session_id": event.session_id, "e_seq": event.seq, "e_run_id": event.run_id,
                       "e_type": event.type.value, "e_ts": event.ts, "e_data": event.data}
            if notify is not None:
                params |= {"n_channel": notify[0], "n_payload": notify[1]}
            return await self.db.scalar(_pg_end_run(tuple(session_values), notify is not None), params) == 1
        if notify is not None:
            raise ValueError("a NOTIFY in the terminal statement needs PostgreSQL")
        if (await self.db.execute(_FINISH_OWNED, params)).rowcount != 1:
            return False
        await SessionRepository(self.db).close_log(event.session_id, event.seq, **session_values)
        await EventRepository(self.db).insert_many([event])
        return True

    async def held(self, run_ids: Iterable[str], owner_id: str) -> set[str]:
        """Those of ``run_ids`` still ACTIVE under ``owner_id``."""
        if on_postgres(self.db):
            result = await self.db.execute(
                _PG_HELD, {"ids": list(run_ids), "owner": owner_id, "active": SessionStatus.ACTIVE.value}
            )
            return set(result.scalars())
        result = await self.db.execute(
            select(AgentRun.id).where(
                AgentRun.id.in_(list(run_ids)), AgentRun.owner_id == owner_id,
                AgentRun.status == SessionStatus.ACTIVE.value,
            )
        )
        return set(result.scalars())

    async def renew_leases(self, run_ids: Sequence[str], owner_id: str, expires_at: datetime) -> list[HeldLease]:
        """Extend the lease of every run in ``run_ids`` still ACTIVE and owned by ``owner_id``, in one
        statement; answers those runs (a missing one was ended by someone else) and their cancel requests."""
        if not run_ids:
            return []
        result = await self.db.execute(
            update(AgentRun)
            .where(
                AgentRun.id.in_(run_ids), AgentRun.owner_id == owner_id,
                AgentRun.status == SessionStatus.ACTIVE.value,
            )
            .values(lease_expires_at=expires_at)
            .returning(AgentRun.id, AgentRun.cancel_requested_at)
            .execution_options(synchronize_session=False)
        )
        return [HeldLease(run_id, cancel_at) for run_id, cancel_at in result.all()]

    async def lock_orphans(self, now: datetime, limit: int) -> list[OrphanRun]:
        """ACTIVE runs whose lease expired, oldest first. On PostgreSQL the rows stay locked until the
        transaction ends and rows another replica has locked are skipped, so concurrent recoveries
        take disjoint sets; SQLite has no row locks (and serialises writers), ``claim_orphan`` guards."""
        result = await self.db.execute(
            select(AgentRun.id, AgentRun.session_id, AgentRun.cancel_requested_at)
            .where(AgentRun.status == SessionStatus.ACTIVE.value, _lease_expired(now))
            .order_by(AgentRun.started_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return [OrphanRun(run_id, session_id, cancel_at) for run_id, session_id, cancel_at in result.all()]

    async def claim_orphan(
        self, run_id: str, owner_id: str, now: datetime, *, status: str, error_code: str
    ) -> bool:
        """End an orphaned run if it still is one: True for exactly one caller per run."""
        result = await self.db.execute(
            update(AgentRun)
            .where(AgentRun.id == run_id, AgentRun.status == SessionStatus.ACTIVE.value, _lease_expired(now))
            .values(status=status, error_code=error_code, ended_at=now, owner_id=owner_id, lease_expires_at=None)
            .execution_options(synchronize_session=False)
        )
        return result.rowcount == 1

    async def save_checkpoints(self, checkpoints: Mapping[str, dict[str, Any]]) -> None:
        """Each run's checkpoint (by run id), in the caller's transaction: the group commit's, which
        checks afterwards that this process still holds every run it wrote."""
        if on_postgres(self.db):
            rows = [{"id": run_id, "state": json_dumps(state)} for run_id, state in checkpoints.items()]
            await self.db.execute(_PG_SAVE_CHECKPOINTS, {"rows": json_dumps(rows)})
            return
        await self.db.execute(
            _SAVE_CHECKPOINT, [{"k_run_id": run_id, "k_state": state} for run_id, state in checkpoints.items()]
        )

    async def release(self, run_id: str, owner_id: str) -> bool:
        """Give up the lease of a run this process executes without ending it (a graceful stop): no
        owner and no lease, so the next sweep of any replica takes it at once. True when it held it."""
        result = await self.db.execute(
            update(AgentRun)
            .where(AgentRun.id == run_id, AgentRun.owner_id == owner_id, AgentRun.status == SessionStatus.ACTIVE.value)
            .values(owner_id=None, lease_expires_at=None)
            .execution_options(synchronize_session=False)
        )
        return result.rowcount == 1

    async def claim_to_continue(
        self, run_id: str, owner_id: str, now: datetime, lease_until: datetime, max_continuations: int,
    ) -> ContinuedRun | None:
        """Take an orphaned run over to continue it, if it still is an orphan and has continuations
        left: the run as it stood for at most one caller per orphaning (as ``claim_orphan``), else None."""
        result = await self.db.execute(
            update(AgentRun)
            .where(AgentRun.id == run_id, AgentRun.status == SessionStatus.ACTIVE.value, _lease_expired(now),
                   AgentRun.continuations < max_continuations)
            .values(owner_id=owner_id, lease_expires_at=lease_until, continuations=AgentRun.continuations + 1)
            .returning(AgentRun.first_seq, AgentRun.checkpoint, AgentRun.continuations, AgentRun.traceparent)
            .execution_options(synchronize_session=False)
        )
        row = result.first()
        return None if row is None else ContinuedRun(run_id, row[0], row[1], row[2], row[3])

    async def request_cancel(self, run_id: str, now: datetime) -> bool:
        """Record a cancel for the run's owner; True when the run is still ACTIVE."""
        result = await self.db.execute(
            update(AgentRun)
            .where(AgentRun.id == run_id, AgentRun.status == SessionStatus.ACTIVE.value)
            # The first request's time is kept: a repeated cancel does not move it.
            .values(cancel_requested_at=func.coalesce(
                AgentRun.cancel_requested_at, literal(now, AgentRun.cancel_requested_at.type)
            ))
            .execution_options(synchronize_session=False)
        )
        return result.rowcount == 1


class EventRepository:
    def __init__(self, db: AsyncSession) -> None:
        self.db = db

    async def insert_many(self, envelopes: Sequence[EventEnvelope]) -> None:
        if on_postgres(self.db):
            rows = [
                {"session_id": env.session_id, "seq": env.seq, "run_id": env.run_id, "type": env.type.value,
                 "ts": env.ts, "data": json_dumps(env.data)}
                for env in envelopes
            ]
            await self.db.execute(_PG_INSERT_EVENTS, {"rows": json_dumps(rows)})
            return
        # SQLite: a Core insert on the table, run as executemany: the ORM bulk path (insert on the mapped
        # class) costs several times more per row on the loop, and no ORM state is wanted.
        # In slices: the driver-side preparation of each slice (bind processing, JSON) runs on the
        # event loop without an await, so one large group commit would stall every live stream;
        # between slices the loop serves them.
        for start in range(0, len(envelopes), _INSERT_SLICE):
            await self.db.execute(
                insert(_EVENTS),
                [
                    {
                        "session_id": env.session_id,
                        "seq": env.seq,
                        "run_id": env.run_id,
                        "type": env.type.value,
                        "ts": env.ts,
                        "data": env.data,
                    }
                    for env in envelopes[start : start + _INSERT_SLICE]
                ],
            )

    async def of_run(self, session_id: str, run_id: str, after_seq: int, type_: EventType) -> list[dict[str, Any]]:
        """The data of the run's events of ``type_`` after ``after_seq``, in seq order."""
        result = await self.db.execute(
            select(AgentEvent.data)
            .where(AgentEvent.session_id == session_id, AgentEvent.seq > after_seq, AgentEvent.run_id == run_id,
                   AgentEvent.type == type_.value)
            .order_by(AgentEvent.seq)
        )
        return list(result.scalars())

    async def after(self, session_id: str, after_seq: int, limit: int) -> list[EventEnvelope]:
        result = await self.db.execute(
            select(AgentEvent)
            .where(AgentEvent.session_id == session_id, AgentEvent.seq > after_seq)
            .order_by(AgentEvent.seq)
            .limit(limit)
        )
        return [
            EventEnvelope(
                session_id=row.session_id, run_id=row.run_id, seq=row.seq, type=EventType(row.type), ts=row.ts,
                data=row.data,
            )
            for row in result.scalars()
        ]
