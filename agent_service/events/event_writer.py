"""What a group commit of run events means for the database.

``shared.group_commit.GroupCommitter`` decides when a batch is written (at most every
``group_commit_ms``, sooner at an event boundary) and retries a failing one in order while the
database is away (``durable_write_budget_seconds``); ``EventWriter._write`` decides how: one
transaction per batch and, when runs are leased, only the events of runs this process still holds
(the others were taken over by another replica, which owns their seqs now). A batch given up after
the budget is reported to ``on_given_up``: the event log ends those runs with an error.

A run's checkpoint (``RunCheckpoint``: where it stands at the end of a step) goes through the same
queue, after the events of that step: it is written in the transaction of the last of them or in a
later one, never before any, so a recovery never finds a run's state ahead of its log. Checkpoints
are rare (one per step, not per token): a batch is looked through for them only while some are queued.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import async_sessionmaker

from agent_service.events.live_tail import LiveTailNotifier, LocalNotifier
from agent_service.metrics import AgentMetrics
from agent_service.repository import EventRepository, RunRepository, SessionRepository
from shared.group_commit import GroupCommitter
from shared.protocol import EventEnvelope
from shared.transactions import transaction

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunCheckpoint:
    """``state`` to store on the run's row, with the run's events queued before it."""

    session_id: str
    run_id: str
    state: dict[str, Any]


Item = EventEnvelope | RunCheckpoint


def _split(batch: list[Item]) -> tuple[list[EventEnvelope], dict[str, dict[str, Any]]]:
    """The batch's events, and the last checkpoint of each run in it (the earlier ones are superseded)."""
    events: list[EventEnvelope] = []
    checkpoints: dict[str, dict[str, Any]] = {}
    for item in batch:
        if type(item) is RunCheckpoint:
            checkpoints[item.run_id] = item.state
        else:
            events.append(item)
    return events, checkpoints


class _RunsLost(Exception):
    def __init__(self, run_ids: set[str]) -> None:
        super().__init__(run_ids)
        self.run_ids = run_ids


class EventWriter:
    """Writes queued events in batches: one transaction per batch, never one per token."""

    def __init__(
        self, sessionmaker: async_sessionmaker, interval_s: float, metrics: AgentMetrics,
        on_written: Callable[[list[EventEnvelope]], None], *, retry_for_s: float = 30.0,
        on_given_up: Callable[[list[EventEnvelope], Exception], None] | None = None, max_pending: int = 50_000,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._metrics = metrics
        self._on_written = on_written
        self._commits: GroupCommitter[Item] = GroupCommitter(
            self._write, interval_s=interval_s, name="agent-event-writer", retry_for_s=retry_for_s,
            on_given_up=on_given_up, max_pending=max_pending,
        )
        # Set when runs are leased (replicas sharing the database): only events of runs this
        # owner still holds are written; ``on_taken_over`` learns of the others.
        self.owner_id: str | None = None
        self.on_taken_over: Callable[[set[str]], None] | None = None
        # Told of each session's last seq inside the batch's transaction (followers elsewhere wake on commit).
        self.notifier: LiveTailNotifier = LocalNotifier(fallback_poll_s=0.5)
        # Checkpoints added and not yet seen written: while 0, a batch holds events only. Lowered
        # only by what a written batch held, so it may stay high (a discard, a batch given up), never low.
        self._checkpoints_queued = 0

    def start(self) -> None:
        self._commits.start()

    def add(self, envelope: EventEnvelope) -> None:
        self._commits.add(envelope)

    def add_checkpoint(self, checkpoint: RunCheckpoint) -> None:
        """Queue ``checkpoint`` behind every event added so far."""
        self._checkpoints_queued += 1
        self._commits.add(checkpoint)

    def has_room(self) -> bool:
        return self._commits.has_room()

    async def room(self) -> None:
        """Return once fewer than ``max_pending`` events wait for the database."""
        await self._commits.room()

    def discard(self, session_id: str) -> None:
        """Drop the queued events of ``session_id``: their seqs now belong to whoever took the
        session over, and a conflicting row would fail the whole batch, other sessions included."""
        self._commits.discard(lambda env: env.session_id != session_id)

    def request_flush(self) -> None:
        self._commits.request_flush()

    async def flush(self) -> None:
        """Return once everything added so far is committed (raises if some of it was given up)."""
        await self._commits.flush()

    async def aclose(self) -> None:
        """Write what is queued, then stop."""
        await self._commits.aclose()

    async def _write(self, batch: list[Item]) -> None:
        """One attempt at the batch; a failure raises, and the group commit tries it again."""
        if not batch:
            return
        events, checkpoints = _split(batch) if self._checkpoints_queued else (batch, {})
        try:
            lost = await self._write_once(events, checkpoints)
        except IntegrityError:
            # A seq already taken: another replica ended one of these runs (after this process's
            # lease expired) and wrote its ERROR there. Anything else is a failure.
            lost = await self._runs_not_held(batch)
            if not lost:
                raise
        if lost:
            # Leave those runs' events out and write the others; the runs stop without a trace.
            log.warning("events of runs another replica took over are dropped", extra={"runs": len(lost)})
            if self.on_taken_over is not None:
                self.on_taken_over(lost)
            await self._write([item for item in batch if item.run_id not in lost])
            return
        self._checkpoints_queued = max(0, self._checkpoints_queued - (len(batch) - len(events)))
        self._metrics.event_batches.observe(len(events))
        self._on_written(events)

    async def _write_once(self, batch: list[EventEnvelope], checkpoints: dict[str, dict[str, Any]]) -> set[str]:
        """Write the batch's events and checkpoints in one transaction; returns (and rolls back for)
        the runs of the batch this process no longer holds, if any."""
        last_seq: dict[str, int] = {}
        for env in batch:
            last_seq[env.session_id] = max(env.seq, last_seq.get(env.session_id, 0))
        try:
            async with transaction(self._sessionmaker) as db:
                await EventRepository(db).insert_many(batch)
                await SessionRepository(db).bump_last_seqs(last_seq)
                if checkpoints:
                    await RunRepository(db).save_checkpoints(checkpoints)
                await self.notifier.announce_many(db, last_seq)
                if self.owner_id is not None:
                    # Checked after the writes: by then this transaction holds the session rows
                    # (SQLite: the write lock), which recovery locks too before it ends a run, so
                    # a recovery either committed before (seen here) or writes after this commit.
                    run_ids = {env.run_id for env in batch} | checkpoints.keys()
                    lost = run_ids - await RunRepository(db).held(run_ids, self.owner_id)
                    if lost:
                        raise _RunsLost(lost)
        except _RunsLost as exc:
            return exc.run_ids
        return set()

    async def _runs_not_held(self, batch: list[Item]) -> set[str]:
        if self.owner_id is None:
            return set()
        run_ids = {env.run_id for env in batch}
        async with self._sessionmaker() as db:
            return run_ids - await RunRepository(db).held(run_ids, self.owner_id)
