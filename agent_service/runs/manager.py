"""The runs this process executes.

A run is an asyncio task of the process, not of the HTTP request, so a client that disconnects
loses nothing. When a run ends, its terminal event and the session's new state are written
together (``endings``), conditional on the process still owning the run: replicas share the
database, and one whose lease expired may have had its run ended (or continued) by another. Each
step's end is checkpointed (``checkpoints``); a graceful stop hands the runs over rather than ending them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from pydantic import BaseModel
from sqlalchemy.ext.asyncio import async_sessionmaker

from agent_service.access.caller import Owner
from agent_service.events.event_log import EventLog, EventsNotSaved, RunTakenOver, SessionChannel
from agent_service.events.snapshots import DEFAULT_MAX_BYTES, SessionSnapshot, SessionSnapshots
from agent_service.metrics import AgentMetrics
from agent_service.profiles.schemas import Profile
from agent_service.repository import RunEnd
from agent_service.runs.admission import capacity_wait
from agent_service.runs.checkpoints import RunCheckpoints, hand_over
from agent_service.runs.endings import CANCELLED, INTERRUPTED, Ending, ending_of
from agent_service.runs.engine import ReActEngine
from agent_service.runs.schemas import RunHandle
from agent_service.runs.state import Completed, Failed, Outcome, Resume, RunContext, RunState
from shared.admission import Slot
from shared.logging import session_id_var
from shared.protocol import ErrorCode, EventType, SessionStatus, UserContext, utcnow
from shared.tracing import NO_TRACING, Tracing, TracingOff

log = logging.getLogger(__name__)

_TAKEN_OVER = "run ended by another replica after its lease expired"
# What ``_outcome`` says of a run stopped by a graceful stop that goes on elsewhere (``hand_over``).
HANDED_OVER = object()
EVENTS_LOST = "some of the run's events could not be saved: its database was unavailable for too long"


@dataclass
class ActiveRun:
    handle: RunHandle
    context: RunContext
    state: RunState
    # The transcript as it was when the run started: what a failed run leaves on the session.
    start_transcript: list[dict]
    resume: Resume | None
    # Opened once the run's claim has committed; events go to it.
    channel: SessionChannel | None
    task: asyncio.Task[None] | None = None
    # A run started before its claim committed (``early_start``): done once it has, cancelled if
    # the claim failed. The run writes nothing before. None: claimed already.
    claimed: asyncio.Future[None] | None = None
    cancel_requested: bool = False
    # Set by the task's first step: a task cancelled before it ever ran would skip its clean-up.
    started: asyncio.Event = field(default_factory=asyncio.Event)
    # The engine returned: the terminal event is being written and must not be interrupted.
    finishing: bool = False
    # Another replica ended the run after this process's lease expired: write nothing more.
    taken_over: bool = False
    # Its place among the runs this process executes at once (``admission``), given back when the
    # task ends; a queued run waits for it before its first model call. None: not admitted here.
    place: Slot | None = None
    # The trace of the run this one continues (an answered question's run): its span links to it.
    linked_trace: str | None = None
    # How it ended, for its duration's label: complete, ask_user, error (none: it wrote no end).
    outcome: str = "none"

    @classmethod
    def of(
        cls, handle: RunHandle, profile: Profile, user_context: UserContext, state: RunState,
        resume: Resume | None = None, channel: SessionChannel | None = None, owner: Owner | None = None,
        start_transcript: list[dict] | None = None,
    ) -> ActiveRun:
        """``start_transcript``: the session's transcript when the run started (default: ``state``'s;
        a continued run's state is further on)."""
        context = RunContext(session_id=handle.session_id, run_id=handle.run_id, profile=profile,
                             user_context=user_context, owner=owner)
        if start_transcript is None:
            start_transcript = state.transcript_json()
        return cls(handle=handle, context=context, state=state, start_transcript=start_transcript,
                   resume=resume, channel=channel)

    @property
    def discarded(self) -> bool:
        """Its claim failed: it never was the session's run, and ends without a trace."""
        return self.claimed is not None and self.claimed.cancelled()


class RunManager:
    """``owner_id`` names the process in the runs it owns; each run is claimed with a lease of
    ``lease_seconds`` that the ``LeaseKeeper`` renews while it runs."""

    def __init__(
        self, *, sessionmaker: async_sessionmaker, event_log: EventLog, engine: ReActEngine, metrics: AgentMetrics,
        owner_id: str, lease_seconds: float, snapshot_max_bytes: int = DEFAULT_MAX_BYTES,
        tracing: Tracing | TracingOff = NO_TRACING, hand_over: bool = False,
    ) -> None:
        """``hand_over``: on shutdown the runs under way are left to be continued from their last
        checkpoint (``checkpoints.hand_over``) instead of ending ERROR INTERRUPTED."""
        self._tracing = tracing
        self._hand_over = hand_over
        self._sessionmaker = sessionmaker
        self._log = event_log
        self._engine = engine
        self._metrics = metrics
        self.owner_id = owner_id
        self.lease_seconds = lease_seconds
        self._runs: dict[str, ActiveRun] = {}
        # Sessions whose last run this process completed: a new message may start from them.
        self.snapshots = SessionSnapshots(max_bytes=snapshot_max_bytes)
        self._shutting_down = False
        # Cancels asked for through another replica, running in the background (strong references).
        self._remote_cancels: set[asyncio.Task[bool]] = set()

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def get(self, session_id: str) -> ActiveRun | None:
        return self._runs.get(session_id)

    def active(self) -> list[ActiveRun]:
        return list(self._runs.values())

    def lease_until(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.lease_seconds)

    def start(self, run: ActiveRun) -> None:
        self.adopt(run)
        self.launch(run)

    def launch(self, run: ActiveRun) -> None:
        """Start the run's task; it is one of this process's runs (cancels, leases, shutdown) once adopted."""
        run.task = asyncio.create_task(self._drive(run), name=f"agent-run-{run.handle.run_id}")

    def adopt(self, run: ActiveRun) -> None:
        self._runs[run.handle.session_id] = run

    def _emit(self, run: ActiveRun) -> Callable[[EventType, BaseModel], Awaitable[None] | None]:
        def emit(type_: EventType, data: BaseModel) -> Awaitable[None] | None:
            if run.taken_over:  # its seqs belong to the replica that ended it
                return None
            self._log.emit(run.channel, type_, data)
            return self._log.room()

        return emit

    def _steps(self, run: ActiveRun) -> RunCheckpoints:
        """Where the run's steps are checkpointed: its channel, while it is this process's."""
        return RunCheckpoints(self._log, lambda: None if run.taken_over else run.channel, len(run.start_transcript),
                              run.context.user_context)

    async def _drive(self, run: ActiveRun) -> None:
        """The run's task: one span (under the execute that started it, which it outlives) and one
        observation of its duration, whose exemplar names that span's trace."""
        context, started = run.context, time.perf_counter()
        with self._tracing.run(context.session_id, context.run_id, context.profile.name,
                               provider=self._engine.provider.name,
                               model=context.profile.model or self._engine.default_model,
                               linked=run.linked_trace) as span:
            await self._drive_run(run)
            span.set_attribute("taskforce.run.outcome", run.outcome)
            self._metrics.run_duration.labels(run.outcome).observe(
                time.perf_counter() - started, self._tracing.exemplar())

    async def _drive_run(self, run: ActiveRun) -> None:
        run.started.set()
        token = session_id_var.set(run.handle.session_id)
        self._metrics.runs_started.inc()
        self._metrics.active_runs.inc()
        log.info("run started", extra={"run_id": run.handle.run_id, "resume": run.resume is not None})
        try:
            outcome = await self._outcome(run)
            if outcome is None:
                return
            if outcome is HANDED_OVER:
                run.finishing = True  # its lease is given up next: a renewal must not take it for lost
                if run.channel is not None and await hand_over(self._sessionmaker, self._log, run.channel,
                                                               self.owner_id):
                    log.info("run handed over on shutdown", extra={"run_id": run.handle.run_id})
                return
            if run.taken_over:
                self._log.abandon(run.channel)
                log.warning(_TAKEN_OVER, extra={"run_id": run.handle.run_id})
                return
            run.finishing = True
            await self._finish(run, outcome)
            if not run.channel.lost:  # else it ended with STORAGE_UNAVAILABLE, whatever the engine said
                self._engine.remember(run.context, run.state, outcome)
        except RunTakenOver:
            log.warning(_TAKEN_OVER, extra={"run_id": run.handle.run_id})
        except Exception:
            log.exception("run could not be finalised", extra={"run_id": run.handle.run_id})
        finally:
            if run.place is not None:
                run.place.release()
            self._metrics.active_runs.dec()
            if self._runs.get(run.handle.session_id) is run:
                del self._runs[run.handle.session_id]
            session_id_var.reset(token)

    async def _outcome(self, run: ActiveRun) -> Outcome | object | None:
        """How the engine's run ended, a cancel included; None for a discarded run, ``HANDED_OVER`` for
        one a graceful stop leaves to another process."""
        try:
            if run.place is not None:
                await run.place.wait(capacity_wait(self._emit(run)))
            outcome = await self._engine.run(
                replace(run.context, steps=self._steps(run)), run.state, self._emit(run), run.resume, ready=run.claimed)
            if run.claimed is not None:
                await run.claimed  # a model that failed at once: its ERROR belongs to a claimed run
            return outcome
        except asyncio.CancelledError:
            if run.discarded:
                return None
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            if self._shutting_down and not run.cancel_requested:
                return HANDED_OVER if self._hand_over and not run.taken_over else Failed(ErrorCode.INTERRUPTED,
                                                                                        INTERRUPTED)
            return Failed(ErrorCode.CANCELLED, CANCELLED)
        except Exception:
            log.exception("run failed unexpectedly", extra={"run_id": run.handle.run_id})
            return Failed(ErrorCode.INTERNAL, "internal error in the agent service")

    async def _finish(self, run: ActiveRun, outcome: Outcome) -> None:
        handle = run.handle
        if not await self._log.durable(run.channel) and not isinstance(outcome, Failed):
            # Some of its events could not be saved: an answer or a question over that hole would
            # tell whoever replays the session less than the run said.
            outcome = Failed(ErrorCode.STORAGE_UNAVAILABLE, EVENTS_LOST)
        now = utcnow()
        ending = ending_of(outcome, run.state, run.start_transcript)
        run.outcome = ending.event.value.lower()
        self._count(ending)

        end = RunEnd(handle.run_id, self.owner_id, ending.status.value, now, ending.error_code,
                     run.state.usage.model_dump())
        try:
            final = await self._log.emit_final(
                run.channel, ending.event, ending.data, end, {"updated_at": now, **ending.session_values()})
        except EventsNotSaved:
            # Given up between the check above and the end: the run ends with the same error.
            await self._finish(run, Failed(ErrorCode.STORAGE_UNAVAILABLE, EVENTS_LOST))
            return
        if isinstance(outcome, Completed):
            self.snapshots.remember(handle.session_id, SessionSnapshot(
                run_id=handle.run_id, last_seq=final.seq, transcript=ending.transcript, owner=run.context.owner))
        log.info("run ended", extra={"run_id": handle.run_id, "outcome": ending.event.value, "code": ending.error_code})

    def _count(self, ending: Ending) -> None:
        if ending.error_code is not None:
            self._metrics.runs_failed.labels(ending.error_code).inc()
        elif ending.status is SessionStatus.AWAITING_USER:
            self._metrics.runs_paused.inc()
        else:
            self._metrics.runs_completed.inc()

    async def cancel(self, session_id: str) -> bool:
        """Cancel this process's run of ``session_id``; True once its ERROR event is written."""
        run = self._runs.get(session_id)
        if run is None or run.task is None:
            return False
        run.cancel_requested = True
        # Wait for the ERROR event to be written; shielded so the caller going away does not
        # interrupt the run's own clean-up.
        await asyncio.shield(self._interrupt_when_started(run))
        return True

    def _interrupt(self, run: ActiveRun) -> None:
        if run.task is not None and run.started.is_set() and not run.finishing:
            run.task.cancel()

    async def _interrupt_when_started(self, run: ActiveRun) -> None:
        await run.started.wait()
        self._interrupt(run)
        assert run.task is not None
        await asyncio.wait([run.task])

    def cancel_requested_elsewhere(self, run: ActiveRun) -> None:
        """Another replica recorded a cancel of this run: cancel it here, in the background."""
        if run.cancel_requested or self._shutting_down:
            return
        log.info("run cancelled through another replica", extra={"run_id": run.handle.run_id})
        task = asyncio.create_task(self.cancel(run.handle.session_id), name=f"agent-cancel-{run.handle.run_id}")
        self._remote_cancels.add(task)
        task.add_done_callback(self._remote_cancels.discard)

    def taken_over_runs(self, run_ids: set[str]) -> None:
        for run in self.active():
            if run.handle.run_id in run_ids:
                self.taken_over(run)

    def taken_over(self, run: ActiveRun) -> None:
        """Another replica ended this run (this process's lease had expired): stop it, write nothing."""
        if run.taken_over or run.finishing:
            return
        run.taken_over = True
        self._interrupt(run)

    async def shutdown(self) -> None:
        """Stop every run: each is handed over to be continued from its last checkpoint (``hand_over``),
        or ends with ERROR INTERRUPTED (retryable) written to the log."""
        self._shutting_down = True
        runs = list(self._runs.values())
        if runs:
            await asyncio.gather(*(self._interrupt_when_started(run) for run in runs), return_exceptions=True)
        if self._remote_cancels:
            await asyncio.gather(*self._remote_cancels, return_exceptions=True)
