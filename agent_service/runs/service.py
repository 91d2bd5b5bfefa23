"""Starting, resuming, joining and cancelling runs.

``RunService`` validates an execute completely before it writes anything, then claims the session
for a new run in one transaction. ``RunManager`` owns the run tasks: a run is an asyncio task of
the process, not of the HTTP request, so a client that disconnects loses nothing. When a run ends,
its terminal event and the session's new state are written together.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from agent_service.errors import (
    RUN_ERROR_RETRYABLE,
    IdempotencyKeyConflict,
    InvalidRequest,
    MessageTooLarge,
    NotAwaitingUser,
    QuestionExpired,
    QuestionMismatch,
    QuestionPending,
    RunInProgress,
    SessionNotFound,
)
from agent_service.metrics import AgentMetrics
from agent_service.models import AgentRun, AgentSession
from agent_service.profiles.schemas import Profile
from agent_service.profiles.service import ProfileStore
from agent_service.runs.engine import (
    Completed,
    Failed,
    Outcome,
    Paused,
    ReActEngine,
    Resume,
    RunContext,
    RunState,
    close_pending_calls,
)
from agent_service.runs.event_log import EventLog, RunTakenOver, SessionChannel
from agent_service.runs.repository import RunRepository
from agent_service.runs.schemas import RunHandle
from agent_service.runs.snapshots import SessionSnapshot, SessionSnapshots
from agent_service.sessions.repository import SessionRepository
from agent_service.settings import AgentServiceSettings
from shared.llm.base import LLMMessage
from shared.logging import session_id_var
from shared.protocol import (
    AskUserData,
    CompleteData,
    ErrorCode,
    ErrorData,
    EventType,
    ExecuteRequest,
    PendingQuestion,
    SessionStatus,
    UserContext,
    utcnow,
)

log = logging.getLogger(__name__)

# Events after which the group-commit writer flushes without waiting for its interval.
_BOUNDARY_EVENTS = frozenset({EventType.TOOL_END, EventType.THOUGHT})
_APPROVE_WORDS = frozenset({"approve", "approved", "yes", "y", "ok", "allow"})


@dataclass
class ActiveRun:
    handle: RunHandle
    context: RunContext
    state: RunState
    # The transcript as it was when the run started: what a failed run leaves on the session.
    start_transcript: list[dict]
    resume: Resume | None
    # Opened once the run's claim has committed (see ``claimed``); events go to it.
    channel: SessionChannel | None
    task: asyncio.Task[None] | None = None
    # A run whose model call starts while its claim is still being written (``start_unclaimed``):
    # done once the claim has committed; the run writes nothing before. None: claimed already.
    claimed: asyncio.Future[None] | None = None
    # Its claim failed: the run ends without a trace (it never was this session's run).
    discarded: bool = False
    cancel_requested: bool = False
    # Set by the task's first step: a task cancelled before it ever ran would skip its clean-up.
    started: asyncio.Event = field(default_factory=asyncio.Event)
    # The engine returned: the terminal event is being written and must not be interrupted.
    finishing: bool = False
    # Another replica ended the run after this process's lease expired: write nothing more.
    taken_over: bool = False


@dataclass
class _SessionLock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


def run_error(code: ErrorCode, message: str) -> ErrorData:
    return ErrorData(code=code.value, message=message, retryable=RUN_ERROR_RETRYABLE.get(code, False))


class RunManager:
    """The runs this process executes. ``owner_id`` names the process in the runs it owns; each run
    is claimed with a lease of ``lease_seconds`` that the ``LeaseKeeper`` renews while it runs."""

    def __init__(
        self, *, sessionmaker: async_sessionmaker, event_log: EventLog, engine: ReActEngine, metrics: AgentMetrics,
        owner_id: str, lease_seconds: float,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._log = event_log
        self._engine = engine
        self._metrics = metrics
        self.owner_id = owner_id
        self.lease_seconds = lease_seconds
        self._runs: dict[str, ActiveRun] = {}
        # Sessions whose last run this process completed: a new message may start from them.
        self.snapshots = SessionSnapshots()
        self._shutting_down = False
        # Cancels asked for through another replica, running in the background (strong references).
        self._remote_cancels: set[asyncio.Task[bool]] = set()

    def get(self, session_id: str) -> ActiveRun | None:
        return self._runs.get(session_id)

    def active(self) -> list[ActiveRun]:
        return list(self._runs.values())

    def lease_until(self, now: datetime) -> datetime:
        return now + timedelta(seconds=self.lease_seconds)

    def start(self, run: ActiveRun) -> None:
        self._runs[run.handle.session_id] = run
        run.task = asyncio.create_task(self._drive(run), name=f"agent-run-{run.handle.run_id}")

    def start_unclaimed(self, run: ActiveRun) -> None:
        """Start ``run`` while its claim is still being written, so its model call overlaps the
        claim's commit; it waits for ``confirm`` before its first event and is not one of this
        process's runs (cancels, leases, shutdown) until then."""
        run.claimed = asyncio.get_running_loop().create_future()
        run.task = asyncio.create_task(self._drive(run), name=f"agent-run-{run.handle.run_id}")

    def confirm(self, run: ActiveRun, handle: RunHandle, channel: SessionChannel) -> None:
        """The claim of a run started unclaimed has committed: it goes on as this session's run."""
        assert run.claimed is not None
        run.handle, run.channel = handle, channel
        self._runs[handle.session_id] = run
        run.claimed.set_result(None)

    def discard(self, run: ActiveRun) -> None:
        """The claim of a run started unclaimed failed: stop its model call, write nothing."""
        assert run.claimed is not None and run.task is not None
        run.discarded = True
        run.claimed.cancel()
        run.task.cancel()

    def _emit(self, run: ActiveRun) -> Callable[[EventType, BaseModel], None]:
        def emit(type_: EventType, data: BaseModel) -> None:
            if run.taken_over:  # its seqs belong to the replica that ended it
                return
            self._log.emit(run.channel, type_, data)
            if type_ in _BOUNDARY_EVENTS:
                self._log.writer.request_flush()

        return emit

    async def _drive(self, run: ActiveRun) -> None:
        run.started.set()
        token = session_id_var.set(run.handle.session_id)
        self._metrics.runs_started.inc()
        self._metrics.active_runs.inc()
        log.info("run started", extra={"run_id": run.handle.run_id, "resume": run.resume is not None})
        try:
            try:
                outcome: Outcome = await self._engine.run(
                    run.context, run.state, self._emit(run), run.resume, ready=run.claimed
                )
                if run.claimed is not None:
                    await run.claimed  # a model that failed at once: its ERROR belongs to a claimed run
            except asyncio.CancelledError:
                if run.discarded:
                    return
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
                if self._shutting_down and not run.cancel_requested:
                    outcome = Failed(ErrorCode.INTERRUPTED, "the service stopped while the run was executing")
                else:
                    outcome = Failed(ErrorCode.CANCELLED, "the run was cancelled")
            except Exception:
                log.exception("run failed unexpectedly", extra={"run_id": run.handle.run_id})
                outcome = Failed(ErrorCode.INTERNAL, "internal error in the agent service")
            if run.taken_over:
                self._log.abandon(run.channel)
                log.warning("run ended by another replica after its lease expired", extra={"run_id": run.handle.run_id})
                return
            run.finishing = True
            await self._finish(run, outcome)
        except RunTakenOver:
            log.warning("run ended by another replica after its lease expired", extra={"run_id": run.handle.run_id})
        except Exception:
            log.exception("run could not be finalised", extra={"run_id": run.handle.run_id})
        finally:
            self._metrics.active_runs.dec()
            if self._runs.get(run.handle.session_id) is run:
                del self._runs[run.handle.session_id]
            session_id_var.reset(token)

    async def _finish(self, run: ActiveRun, outcome: Outcome) -> None:
        handle, state = run.handle, run.state
        now = utcnow()
        if isinstance(outcome, Completed):
            type_, data = EventType.COMPLETE, CompleteData(answer=outcome.answer, usage=outcome.usage)
            session_values = {
                "status": SessionStatus.COMPLETED.value, "transcript": [m.to_dict() for m in state.transcript],
                "run_state": None, "pending_question": None,
            }
            run_status, error_code = SessionStatus.COMPLETED.value, None
            self._metrics.runs_completed.inc()
        elif isinstance(outcome, Paused):
            q = outcome.question
            type_ = EventType.ASK_USER
            data = AskUserData(
                question_id=q.question_id, question=q.question, expires_at=q.expires_at, kind=q.kind, tool=q.tool,
                args=q.args,
            )
            pending = q.model_dump(mode="json") | {"call_id": outcome.call_id}
            session_values = {
                "status": SessionStatus.AWAITING_USER.value, "transcript": [m.to_dict() for m in state.transcript],
                "run_state": state.to_json(), "pending_question": pending,
            }
            run_status, error_code = SessionStatus.AWAITING_USER.value, None
            self._metrics.runs_paused.inc()
        else:
            type_, data = EventType.ERROR, run_error(outcome.code, outcome.message)
            status = SessionStatus.CANCELLED if outcome.code is ErrorCode.CANCELLED else SessionStatus.FAILED
            session_values = {
                "status": status.value, "transcript": run.start_transcript, "run_state": None, "pending_question": None
            }
            run_status, error_code = status.value, outcome.code.value
            self._metrics.runs_failed.labels(outcome.code.value).inc()

        async def finalize(db: AsyncSession) -> None:
            # Conditional on still owning the run: if this process stalled past its lease and
            # another replica's recovery ended the run, the whole terminal write rolls back.
            owned = await RunRepository(db).finish_owned(
                handle.run_id, self.owner_id, status=run_status, ended_at=now, error_code=error_code,
                usage=state.usage.model_dump(),
            )
            if not owned:
                raise RunTakenOver(handle.run_id)
            await SessionRepository(db).update(handle.session_id, updated_at=now, **session_values)

        final = await self._log.emit_final(run.channel, type_, data, finalize)
        if isinstance(outcome, Completed):
            self.snapshots.remember(handle.session_id, SessionSnapshot(
                run_id=handle.run_id, last_seq=final.seq, transcript=session_values["transcript"]))
        log.info("run ended", extra={"run_id": handle.run_id, "outcome": type_.value, "code": error_code})

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
        """Stop every run; each ends with ERROR INTERRUPTED (retryable) written to the log."""
        self._shutting_down = True
        runs = list(self._runs.values())
        if runs:
            await asyncio.gather(*(self._interrupt_when_started(run) for run in runs), return_exceptions=True)
        if self._remote_cancels:
            await asyncio.gather(*self._remote_cancels, return_exceptions=True)


class RunService:
    def __init__(
        self, *, settings: AgentServiceSettings, sessionmaker: async_sessionmaker, profiles: ProfileStore,
        manager: RunManager, event_log: EventLog,
    ) -> None:
        self._settings = settings
        self._sessionmaker = sessionmaker
        self._profiles = profiles
        self._manager = manager
        self._log = event_log
        # Serialises executes of one session inside this process; the database claim guards
        # against other processes.
        self._locks: dict[str, _SessionLock] = {}

    # --- execute --------------------------------------------------------------------------

    def _validate(self, request: ExecuteRequest, idempotency_key: str | None) -> None:
        if len(request.message) > self._settings.max_message_chars:
            raise MessageTooLarge(
                f"message has {len(request.message)} characters; the limit is {self._settings.max_message_chars}"
            )
        if request.answer is not None:
            if request.session_id is None:
                raise InvalidRequest("an answer needs the session_id of the paused session")
            if len(request.answer.text) > self._settings.max_message_chars:
                raise MessageTooLarge(
                    f"answer has {len(request.answer.text)} characters; "
                    f"the limit is {self._settings.max_message_chars}"
                )
        elif not request.message.strip():
            raise InvalidRequest("message must not be empty (or send an answer)")
        if idempotency_key is not None and not (0 < len(idempotency_key) <= 128 and idempotency_key.isprintable()):
            raise InvalidRequest("Idempotency-Key must be 1 to 128 printable characters")

    async def execute(self, request: ExecuteRequest, idempotency_key: str | None) -> RunHandle:
        self._validate(request, idempotency_key)
        profile = self._profiles.get(request.profile_name)  # 404 before anything is written
        session_id = request.session_id or uuid.uuid4().hex
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = _SessionLock()
        lock.users += 1
        try:
            async with lock.lock:
                return await self._start(request, idempotency_key, session_id, profile.name)
        finally:
            lock.users -= 1
            if lock.users == 0:  # drop idle locks so the map does not grow with every session
                self._locks.pop(session_id, None)

    async def _join(self, request: ExecuteRequest, key: str) -> RunHandle | None:
        async with self._sessionmaker() as db:
            return await self._joined(db, request, key)

    @staticmethod
    async def _joined(db: AsyncSession, request: ExecuteRequest, key: str) -> RunHandle | None:
        """The run that ``key`` already started, as a handle to follow (None: no such run)."""
        run = await RunRepository(db).get_by_idempotency_key(key)
        if run is None:
            return None
        if request.session_id is not None and request.session_id != run.session_id:
            raise IdempotencyKeyConflict("this Idempotency-Key was used for another session")
        return RunHandle(session_id=run.session_id, run_id=run.id, first_seq=run.first_seq, joined=True)

    async def _start(
        self, request: ExecuteRequest, key: str | None, session_id: str, profile_name: str
    ) -> RunHandle:
        now = utcnow()
        run_id = uuid.uuid4().hex
        resume: Resume | None = None
        expired_question = False
        early: ActiveRun | None = None

        def start_early(state: RunState, first_seq: int, profile: Profile) -> None:
            # A new message's run starts before its claim is written: the model's time to first
            # token covers the claim's writes and commit, which otherwise came before the model
            # call. It writes nothing until the claim has committed (RunManager.confirm).
            nonlocal early
            if resume is None:
                early = ActiveRun(
                    handle=RunHandle(session_id=session_id, run_id=run_id, first_seq=first_seq),
                    context=RunContext(session_id=session_id, run_id=run_id, profile=profile,
                                       user_context=request.user_context),
                    state=state, start_transcript=[m.to_dict() for m in state.transcript], resume=None, channel=None,
                )
                self._manager.start_unclaimed(early)

        # A new message to a session whose last run this process completed starts from that run's
        # transcript, before the session is even read; the read below confirms it.
        snapshot = None
        if request.session_id is not None and request.answer is None:
            snapshot = self._manager.snapshots.take(session_id)
        if snapshot is not None:
            start_early(self._continued(snapshot.transcript, request), snapshot.last_seq + 1,
                        self._profiles.get(profile_name))

        try:
            async with self._sessionmaker.begin() as db:
                if key is not None:
                    # A retry joins the run its key started. Read in the claim's transaction, not
                    # in one of its own before it: one connection and one transaction per execute
                    # on the way to the model call. A concurrent first try is caught by the key's
                    # unique index below.
                    joined = await self._joined(db, request, key)
                    if joined is not None:
                        if early is not None:
                            self._manager.discard(early)
                        return joined
                sessions = SessionRepository(db)
                session = await sessions.get_for_update(session_id) if request.session_id else None
                if request.session_id is not None and session is None:
                    raise SessionNotFound(f"no session {request.session_id!r}")
                if session is not None:
                    if session.status == SessionStatus.ACTIVE.value:
                        raise RunInProgress(
                            {"message": "a run of this session is still executing; wait for it, cancel it, or "
                                        "retry with the same Idempotency-Key to follow it",
                             "session_id": session_id, "run_id": session.current_run_id}
                        )
                    profile_name = session.profile_name if request.answer is not None else profile_name
                    profile = self._profiles.get(profile_name)
                    pending = session.pending_question
                    if request.answer is not None:
                        if session.status != SessionStatus.AWAITING_USER.value or pending is None:
                            raise NotAwaitingUser(f"session is {session.status}, not waiting for an answer")
                        if pending["question_id"] != request.answer.question_id:
                            raise QuestionMismatch(
                                {"message": "the answer is for another question",
                                 "pending_question_id": pending["question_id"]}
                            )
                        question = PendingQuestion.model_validate(pending)
                        if question.expires_at <= now:
                            expired_question = True
                        else:
                            resume = Resume(
                                kind=question.kind, text=request.answer.text,
                                approved=self._approved(request),
                            )
                    elif session.status == SessionStatus.AWAITING_USER.value and pending is not None:
                        if PendingQuestion.model_validate(pending).expires_at > now:
                            raise QuestionPending(
                                {"message": "the session waits for an answer to its question; send it as answer",
                                 "question_id": pending["question_id"]}
                            )
                        expired_question = True
                    if expired_question:
                        # Written and committed even when the answer is then refused with 410: the
                        # session must not wait for an answer that can no longer come.
                        await self._expire(db, session, now)
                    if request.answer is None or not expired_question:
                        state = self._state_for(session, request, profile.system_prompt, resume)
                        first_seq = session.last_seq + 1
                        if early is not None and not (snapshot is not None and snapshot.matches(session)):
                            self._manager.discard(early)  # the session changed since: start from it
                            early = None
                        if early is None:
                            start_early(state, first_seq, profile)
                        else:
                            state = early.state  # the same transcript: the snapshot was confirmed
                        claimed = await sessions.claim(
                            session_id, run_id, now,
                            {"profile_name": profile.name, "transcript": [m.to_dict() for m in state.transcript],
                             "run_state": state.to_json() if resume else None, "pending_question": None},
                        )
                        if not claimed:
                            raise RunInProgress({"message": "another run claimed this session", "session_id": session_id})
                else:
                    profile = self._profiles.get(profile_name)
                    state = RunState(transcript=self._initial_transcript(request, profile.system_prompt))
                    first_seq = 1
                    start_early(state, first_seq, profile)
                    sessions.add(
                        AgentSession(
                            id=session_id, profile_name=profile.name, status=SessionStatus.ACTIVE.value,
                            user_context=request.user_context.model_dump(mode="json"),
                            transcript=[m.to_dict() for m in state.transcript], run_state=None,
                            pending_question=None, last_seq=0, current_run_id=run_id, created_at=now, updated_at=now,
                        )
                    )
                    await db.flush()
                if not (expired_question and request.answer is not None):
                    RunRepository(db).add(
                        AgentRun(
                            id=run_id, session_id=session_id, idempotency_key=key, status=SessionStatus.ACTIVE.value,
                            first_seq=first_seq, started_at=now, owner_id=self._manager.owner_id,
                            lease_expires_at=self._manager.lease_until(now),
                        )
                    )
                    await db.flush()
        except IntegrityError:
            if early is not None:
                self._manager.discard(early)
            # A concurrent execute with the same Idempotency-Key (or session id) won the race.
            if key is not None:
                joined = await self._join(request, key)
                if joined is not None:
                    return joined
            raise RunInProgress({"message": "a concurrent execute created this run", "session_id": session_id})
        except BaseException:
            if early is not None:
                self._manager.discard(early)
            raise
        if expired_question and request.answer is not None:
            raise QuestionExpired("the question expired before it was answered; send a new message")

        user_context = (
            UserContext.model_validate(session.user_context) if session is not None and request.answer is not None
            else request.user_context
        )
        channel = self._log.open_channel(session_id, run_id, first_seq)
        # Subscribed before the run can emit: its first events go straight to this execute's
        # stream, never through a log read that would queue behind other runs' group commits.
        live, _, _ = self._log.subscribe(session_id)
        handle = RunHandle(session_id=session_id, run_id=run_id, first_seq=first_seq, live=live)
        if early is not None:
            self._manager.confirm(early, handle, channel)
            return handle
        self._manager.start(
            ActiveRun(
                handle=handle,
                context=RunContext(session_id=session_id, run_id=run_id, profile=profile, user_context=user_context),
                state=state,
                start_transcript=[m.to_dict() for m in state.transcript],
                resume=resume,
                channel=channel,
            )
        )
        return handle

    @staticmethod
    def _approved(request: ExecuteRequest) -> bool:
        answer = request.answer
        assert answer is not None
        if answer.approved is not None:
            return answer.approved
        return answer.text.strip().lower().rstrip(".!") in _APPROVE_WORDS

    @staticmethod
    def _initial_transcript(request: ExecuteRequest, system_prompt: str) -> list[LLMMessage]:
        transcript = [LLMMessage(role="system", content=system_prompt)]
        transcript += [LLMMessage(role=m.role.value, content=m.content) for m in request.chat_history]
        transcript.append(LLMMessage(role="user", content=request.message))
        return transcript

    def _state_for(
        self, session: AgentSession, request: ExecuteRequest, system_prompt: str, resume: Resume | None
    ) -> RunState:
        if resume is not None:
            return RunState.from_json(session.transcript, session.run_state)
        if not session.transcript:
            return RunState(transcript=self._initial_transcript(request, system_prompt))
        return self._continued(session.transcript, request)

    @staticmethod
    def _continued(transcript: list[dict], request: ExecuteRequest) -> RunState:
        # A new message continues the session's own transcript (it holds the tool calls the
        # caller's chat history does not); the caller's history seeds only a new session.
        state = RunState.from_json(transcript, None)
        state.transcript.append(LLMMessage(role="user", content=request.message))
        return state

    async def _expire(self, db: AsyncSession, session: AgentSession, now) -> None:
        state = RunState.from_json(session.transcript, session.run_state)
        close_pending_calls(state, "the user did not answer in time")
        await self._log.append_direct(
            db, session.id, session.current_run_id or "expired", session.last_seq + 1, EventType.ERROR,
            run_error(ErrorCode.QUESTION_EXPIRED, "the question expired before it was answered"),
        )
        await SessionRepository(db).update(
            session.id, status=SessionStatus.FAILED.value, pending_question=None, run_state=None,
            transcript=[m.to_dict() for m in state.transcript], updated_at=now,
        )
        session.status = SessionStatus.FAILED.value
        session.last_seq += 1
        session.transcript = [m.to_dict() for m in state.transcript]
        session.pending_question = None
