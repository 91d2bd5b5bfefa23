"""Run ownership across replicas that share one database.

Every process has an ``owner_id``; a run row names its owner and a lease expiry. The
``LeaseKeeper`` of each process, every ``renew_seconds``:

1. renews the leases of all the process's runs in one UPDATE, which also answers the cancel
   requests other replicas recorded for them and which runs the process no longer holds;
2. recovers orphans: ACTIVE runs whose lease expired (their owner crashed or stalled), each
   claimed with a conditional UPDATE (rows locked ``FOR UPDATE SKIP LOCKED`` on PostgreSQL) so that
   exactly one replica takes it. It continues the run from its last checkpoint in this process
   (``continuation``), or, when the run may not be continued (a cancel was requested, its continuations
   are spent, its profile is gone), ends it with an ERROR event at the session's next seq:
   ``CANCELLED`` when a cancel had been requested, else ``INTERRUPTED``.

Recovery also runs once at start-up, before the process accepts requests. Leases are compared with
each replica's own clock: clocks must agree to well within the lease (NTP does).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid

from sqlalchemy.ext.asyncio import async_sessionmaker

from agent_service.events.event_log import EventLog
from agent_service.metrics import AgentMetrics
from agent_service.repository import OrphanRun, RunRepository, SessionRepository
from agent_service.runs.continuation import Continuation, RunContinuation
from agent_service.runs.endings import CANCELLED, INTERRUPTED, end_with_error, ended_status
from agent_service.runs.manager import RunManager
from shared.cancel_safety import stop_loop
from shared.protocol import ErrorCode, SessionStatus, utcnow
from shared.transactions import is_unavailable, transaction

log = logging.getLogger(__name__)

# Runs renewed per statement (bound parameters stay far below every driver's limit).
_RENEW_CHUNK = 500
# Orphans claimed per transaction: small enough that locks are short, large enough for a backlog.
_RECOVERY_BATCH = 20
# On shutdown, how long a pass under way (a renewal or a recovery transaction) may take to finish.
_STOP_GRACE_S = 5.0


def new_owner_id() -> str:
    """A name for this process that no other process, earlier or later, ever has."""
    return f"{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class LeaseKeeper:
    def __init__(
        self, *, sessionmaker: async_sessionmaker, manager: RunManager, event_log: EventLog, metrics: AgentMetrics,
        renew_seconds: float, continuation: RunContinuation | None = None,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._manager = manager
        # None: orphans are ended, never continued.
        self._continuation = continuation
        self._log = event_log
        self._metrics = metrics
        self._renew_seconds = renew_seconds
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        # Completed renew-and-recover passes, for whoever needs to wait for the next one.
        self.passes = 0
        self._pass_done = asyncio.Condition()

    @property
    def owner_id(self) -> str:
        return self._manager.owner_id

    def start(self) -> None:
        self._stop.clear()
        self._task = asyncio.create_task(self._loop(), name="agent-lease-keeper")

    async def aclose(self) -> None:
        # Between passes: a pass cancelled half-way would leave its transaction's locks to the database.
        if self._task is not None:
            await stop_loop(self._task, self._stop, _STOP_GRACE_S)
            self._task = None

    async def wait_for_passes(self, count: int) -> None:
        """Return once ``count`` more passes (renewal and recovery) have completed."""
        async with self._pass_done:
            target = self.passes + count
            await self._pass_done.wait_for(lambda: self.passes >= target)

    async def _loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._stop.wait(), self._renew_seconds)
                return
            except TimeoutError:
                pass
            # Each step logs and survives its own failure: a database hiccup must not end the
            # renewals (the runs would then be failed by other replicas as orphans).
            for step, failed in ((self.renew, "run leases could not be renewed"),
                                 (self.recover, "recovery of orphaned runs failed")):
                try:
                    await step()
                except Exception as exc:
                    if is_unavailable(exc):  # a restart: said without a traceback on every pass
                        log.warning(failed, extra={"error_type": type(exc).__name__, "database": "unavailable"})
                    else:
                        log.exception(failed)
            async with self._pass_done:
                self.passes += 1
                self._pass_done.notify_all()

    async def renew(self) -> None:
        """Extend the lease of every run of this process; act on cancels and lost runs."""
        runs = {run.handle.run_id: run for run in self._manager.active()}
        if not runs:
            return
        ids = list(runs)
        held: dict[str, bool] = {}
        async with transaction(self._sessionmaker) as db:
            repository = RunRepository(db)
            expires_at = self._manager.lease_until(utcnow())
            for start in range(0, len(ids), _RENEW_CHUNK):
                for lease in await repository.renew_leases(ids[start:start + _RENEW_CHUNK], self.owner_id, expires_at):
                    held[lease.run_id] = lease.cancel_requested_at is not None
        for run_id, run in runs.items():
            if run_id not in held:
                # Not ACTIVE under this owner any more. A run that ended on its own between the
                # snapshot and the UPDATE is finishing or gone; anything else was taken over.
                if not run.finishing and self._manager.get(run.handle.session_id) is run:
                    log.warning("run lease lost to another replica", extra={"run_id": run_id})
                    self._manager.taken_over(run)
            elif held[run_id]:
                self._manager.cancel_requested_elsewhere(run)

    async def recover(self) -> int:
        """Continue or end every run whose lease expired, each exactly once across replicas; returns
        how many this process took."""
        recovered = 0
        while True:
            claimed, seen = await self._recover_batch()
            recovered += claimed
            if seen < _RECOVERY_BATCH or claimed == 0:
                return recovered

    def _launch(self, continuation: Continuation) -> None:
        assert self._continuation is not None
        try:
            self._continuation.launch(continuation)
        except Exception:
            # Left ACTIVE under a lease this process does not renew: a later sweep takes it again.
            log.exception("orphaned run could not be continued", extra={"run_id": continuation.handle.run_id})

    async def _recover_batch(self) -> tuple[int, int]:
        if self._manager.shutting_down:
            return 0, 0  # a stopping process takes no run over: it would stop it again at once
        now = utcnow()
        claimed: list[tuple[OrphanRun, ErrorCode]] = []
        continued: list[Continuation] = []
        async with transaction(self._sessionmaker) as db:
            runs = RunRepository(db)
            sessions = SessionRepository(db)
            orphans = await runs.lock_orphans(now, _RECOVERY_BATCH)
            for orphan in orphans:
                if self._manager.get(orphan.session_id) is not None:
                    continue  # this process runs it: a renewal is merely late
                cancelled = orphan.cancel_requested_at is not None
                # After the run's row (locked above): the order the terminal write locks them in.
                session = await sessions.get_for_update(orphan.session_id)
                # The session may have moved on (a later run); only its current run's end is its own.
                current = session is not None and session.status == SessionStatus.ACTIVE.value \
                    and session.current_run_id == orphan.run_id
                if current and not cancelled and self._continuation is not None:
                    continuation = await self._continuation.claim(db, orphan, session, now)
                    if continuation is not None:
                        continued.append(continuation)
                        continue
                code = ErrorCode.CANCELLED if cancelled else ErrorCode.INTERRUPTED
                if not await runs.claim_orphan(orphan.run_id, self.owner_id, now, status=ended_status(code).value,
                                               error_code=code.value):
                    continue  # another replica got there first
                if current:
                    message = CANCELLED if cancelled else INTERRUPTED
                    await end_with_error(db, self._log, session, orphan.run_id, code, message, now=now)
                claimed.append((orphan, code))
        for continuation in continued:
            self._launch(continuation)
        for orphan, code in claimed:
            self._metrics.runs_failed.labels(code.value).inc()
            log.warning(
                "orphaned run ended", extra={"run_id": orphan.run_id, "session_id": orphan.session_id, "code": code.value}
            )
        return len(claimed) + len(continued), len(orphans)
