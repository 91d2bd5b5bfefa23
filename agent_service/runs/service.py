"""Starting, resuming and joining runs: ``RunService.execute``.

An execute is checked completely before it writes anything, then claims its session for a new run
in one transaction: joining instead the run its Idempotency-Key already started, ending first a
question that expired. A new message's model call starts before the claim has committed
(``early_start``). Once the claim has, the run goes to the ``RunManager``.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from agent_service.access.caller import Caller, Owner
from agent_service.errors import IdempotencyKeyConflict, QuestionExpired, RunInProgress, SessionNotFound
from agent_service.events.event_log import EventLog
from agent_service.models import AgentSession, next_seq, owner_of
from agent_service.profiles.schemas import Profile
from agent_service.profiles.service import ProfileStore
from agent_service.repository import RunRepository, SessionRepository
from agent_service.runs.checkpoints import start_checkpoint
from agent_service.runs.early_start import EarlyModelCall
from agent_service.runs.endings import end_with_error
from agent_service.runs.manager import ActiveRun, RunManager
from agent_service.runs.schemas import RunHandle
from agent_service.runs.state import Resume, RunState
from agent_service.runs.validation import check_request, turn_for
from agent_service.settings import AgentServiceSettings
from shared.admission import Admission, Slot
from shared.keyed_lock import KeyedLock
from shared.protocol import ErrorCode, ExecuteRequest, SessionStatus, UserContext, utcnow
from shared.tracing import NO_TRACING, Tracing, TracingOff
from shared.transactions import transaction


@dataclass(frozen=True, slots=True)
class Claim:
    """A session claimed for a new run: what the run starts from."""

    session_id: str
    run_id: str
    first_seq: int
    # The session's seq_reserved as this claim set it: the run may show seqs up to it.
    reserved: int
    profile: Profile
    state: RunState
    resume: Resume | None
    user_context: UserContext
    owner: Owner
    # The trace of the run this one continues (the question's): a resumed run links to it.
    linked_trace: str | None = None


class RunService:
    def __init__(
        self, *, settings: AgentServiceSettings, sessionmaker: async_sessionmaker, profiles: ProfileStore,
        manager: RunManager, event_log: EventLog, admission: Admission, tracing: Tracing | TracingOff = NO_TRACING,
    ) -> None:
        self._admission = admission
        self._tracing = tracing
        self._settings = settings
        self._sessionmaker = sessionmaker
        self._profiles = profiles
        self._manager = manager
        self._log = event_log
        # Serialises executes of one session inside this process; the database claim guards
        # against other processes.
        self._locks = KeyedLock()

    async def execute(
        self, request: ExecuteRequest, idempotency_key: str | None, caller: Caller, *,
        new_session_id: str | None = None, context_id: str | None = None,
    ) -> RunHandle:
        """Start (or join, or resume) a run for ``caller``, acting for the user it may act for (403
        otherwise); a session it may not see is not found. ``new_session_id``: a new session (no
        ``request.session_id``) takes this id instead of a generated one; an A2A client may choose its
        own ``contextId``. It fails like a concurrent start (409) when a session has the id already.
        ``context_id``: the A2A context a new session holds under another id (``a2a.repository``)."""
        check_request(request, idempotency_key, self._settings.max_message_chars)
        acting = caller.acting_for(request.user_context)
        if acting is not request.user_context:
            request = request.model_copy(update={"user_context": acting})
        # Keys are the caller's own: another caller's retry never joins this caller's run.
        idempotency_key = scoped_key(caller, idempotency_key)
        profile = self._profiles.get(request.profile_name)  # 404 before anything is written
        session_id = request.session_id or new_session_id or uuid.uuid4().hex
        # Before anything is written: past capacity and queue, a 503 with Retry-After and no trace.
        place = self._admission.admit()
        try:
            async with self._locks(session_id):
                handle = await self._start(request, idempotency_key, session_id, profile, place, caller, context_id)
        except BaseException:
            place.release()
            raise
        if handle.joined:
            place.release()  # the run it joined has a place of its own
        return handle

    async def _start(
        self, request: ExecuteRequest, key: str | None, session_id: str, profile: Profile, place: Slot, caller: Caller,
        context_id: str | None = None,
    ) -> RunHandle:
        try:
            # A run that has to wait for its place does not call the model before it has one.
            with EarlyModelCall(
                self._manager, request, session_id, uuid.uuid4().hex, caller=caller, enabled=place.granted,
            ) as early:
                if request.session_id is not None and request.answer is None:
                    early.start_from_snapshot(profile)
                claim = await self._claim(request, key, session_id, profile, early, caller, context_id)
                return claim if isinstance(claim, RunHandle) else self._launch(claim, early, place)
        except IntegrityError:
            # A concurrent execute with the same Idempotency-Key (or session id) won the race.
            if key is not None:
                joined = await self._join(request, key)
                if joined is not None:
                    return joined
            raise RunInProgress({"message": "a concurrent execute created this run", "session_id": session_id})

    async def _claim(
        self, request: ExecuteRequest, key: str | None, session_id: str, profile: Profile, early: EarlyModelCall,
        caller: Caller, context_id: str | None,
    ) -> RunHandle | Claim:
        """The claim's transaction: the run its key started (joined), or the session claimed for a
        new run and the run's row written (one statement on PostgreSQL after the session's read,
        ``SessionRepository.insert_with_run`` and ``claim``). In a transaction even where it is one
        statement: a claim cancelled while the statement runs (its client gone) must leave nothing,
        which only a rollback can promise; in autocommit the statement may commit a run nobody starts."""
        now = utcnow()
        async with transaction(self._sessionmaker) as db:
            if key is not None:
                # A retry joins the run its key started. Read in the claim's transaction, not in one
                # of its own before it: one connection and one transaction per execute on the way
                # to the model call. A concurrent first try is caught by the key's unique index.
                joined = await self._joined(db, request, key)
                if joined is not None:
                    return joined
            if request.session_id is None:
                claim = await self._claim_new(db, request, key, session_id, profile, early, now, caller, context_id)
            else:
                claim = await self._claim_session(db, request, key, profile, early, now, caller)
        if claim is None:
            raise QuestionExpired("the question expired before it was answered; send a new message")
        return claim

    def _run_row(
        self, run_id: str, session_id: str, first_seq: int, key: str | None, now: datetime, caller: Caller,
    ) -> dict[str, Any]:
        return {
            "id": run_id, "session_id": session_id, "idempotency_key": key, "status": SessionStatus.ACTIVE.value,
            "first_seq": first_seq, "started_at": now, "owner_id": self._manager.owner_id,
            "lease_expires_at": self._manager.lease_until(now), "traceparent": self._tracing.traceparent(),
            "owner": caller.principal,
        }

    async def _claim_new(
        self, db: AsyncSession, request: ExecuteRequest, key: str | None, session_id: str, profile: Profile,
        early: EarlyModelCall, now: datetime, caller: Caller, context_id: str | None,
    ) -> Claim:
        state = RunState.first(request, profile.system_prompt)
        user = request.user_context
        owner = caller.owner_of(user)
        early.start(state, 1, profile, owner)
        run_id = early.run_id
        await SessionRepository(db).insert_with_run(
            {"id": session_id, "profile_name": profile.name, "status": SessionStatus.ACTIVE.value,
             "user_context": user.model_dump(mode="json"), "transcript": state.transcript_json(),
             "run_state": None, "pending_question": None, "last_seq": 0, "seq_reserved": self._log.seq_block,
             "current_run_id": run_id, "created_at": now, "updated_at": now,
             "owner": owner.principal, "user_id": owner.user_id, "org_id": owner.org_id, "context_id": context_id},
            self._run_row(run_id, session_id, 1, key, now, caller),
        )
        return Claim(session_id, run_id, 1, self._log.seq_block, profile, state, None, user, owner)

    async def _claim_session(
        self, db: AsyncSession, request: ExecuteRequest, key: str | None, profile: Profile, early: EarlyModelCall,
        now: datetime, caller: Caller,
    ) -> Claim | None:
        """None: the answered question had expired (its end is written, the answer refused)."""
        sessions = SessionRepository(db)
        session = await sessions.get_for_update(request.session_id)
        if session is None or not _may_continue(caller, session, request.user_context):
            raise SessionNotFound(f"no session {request.session_id!r}")
        owner = owner_of(session)
        if session.status == SessionStatus.ACTIVE.value:
            raise RunInProgress(
                {"message": "a run of this session is still executing; wait for it, cancel it, or retry with the "
                            "same Idempotency-Key to follow it",
                 "session_id": session.id, "run_id": session.current_run_id}
            )
        if request.answer is not None:
            profile = self._profiles.get(session.profile_name)
        turn = turn_for(session, request, now)
        if turn.expired:
            # Written and committed even when the answer is then refused with 410: the session must
            # not wait for an answer that can no longer come.
            await end_with_error(
                db, self._log, session, session.current_run_id or "expired", ErrorCode.QUESTION_EXPIRED,
                "the question expired before it was answered", now=now, close_calls="the user did not answer in time",
            )
            if request.answer is not None:
                return None
        state = early.state_for(session)
        if state is None:
            state = self._state_for(session, request, profile, turn.resume)
            if turn.resume is None:
                early.start(state, next_seq(session), profile, owner)
        # After any hole a crashed run left; the run may show a block of seqs before they are written.
        first_seq = next_seq(session)
        reserved = first_seq - 1 + self._log.seq_block
        user_context = (
            UserContext.model_validate(session.user_context) if request.answer is not None else request.user_context
        )
        run = self._run_row(early.run_id, session.id, first_seq, key, now, caller)
        # Until its first step ends, what a continuation after a crash would lack: its answer, its user.
        start = start_checkpoint(turn.resume, user_context, session.user_context)
        if start is not None:
            run["checkpoint"] = start
        claimed = await sessions.claim(
            session.id, early.run_id, now,
            {"profile_name": profile.name, "transcript": state.transcript_json(),
             "run_state": state.to_json() if turn.resume else None, "pending_question": None,
             "seq_reserved": reserved},
            run=run,
        )
        if not claimed:
            raise RunInProgress({"message": "another run claimed this session", "session_id": session.id})
        linked = None
        if turn.resume is not None and self._tracing.enabled and session.current_run_id:
            linked = await RunRepository(db).traceparent_of(session.current_run_id)
        return Claim(session.id, early.run_id, first_seq, reserved, profile, state, turn.resume, user_context, owner,
                     linked)

    @staticmethod
    def _state_for(session: AgentSession, request: ExecuteRequest, profile: Profile, resume: Resume | None) -> RunState:
        if resume is not None:
            return RunState.from_json(session.transcript, session.run_state)
        if not session.transcript:
            return RunState.first(request, profile.system_prompt)
        # The caller's chat history seeds only a new session.
        return RunState.continued(session.transcript, request)

    def _launch(self, claim: Claim, early: EarlyModelCall, place: Slot) -> RunHandle:
        channel = self._log.open_channel(claim.session_id, claim.run_id, claim.first_seq, reserved=claim.reserved)
        # Subscribed before the run can emit: its first events go straight to this execute's
        # stream, never through a log read that would queue behind other runs' group commits.
        live, _, _ = self._log.subscribe(claim.session_id)
        handle = RunHandle(session_id=claim.session_id, run_id=claim.run_id, first_seq=claim.first_seq, live=live)
        # From here the run owns its place: it gives it back when its task ends.
        if early.started:
            early.confirm(handle, channel, place)
        else:
            run = ActiveRun.of(handle, claim.profile, claim.user_context, claim.state, claim.resume, channel, claim.owner)
            run.place, run.linked_trace = place, claim.linked_trace
            self._manager.start(run)
        return handle

    async def _join(self, request: ExecuteRequest, key: str) -> RunHandle | None:
        async with self._sessionmaker() as db:
            return await self._joined(db, request, key)

    @staticmethod
    async def _joined(db: AsyncSession, request: ExecuteRequest, key: str) -> RunHandle | None:
        """The run that ``key`` (``scoped_key``: this caller's) already started, as a handle to follow
        (None: no such run)."""
        run = await RunRepository(db).get_by_idempotency_key(key)
        if run is None:
            return None
        if request.session_id is not None and request.session_id != run.session_id:
            raise IdempotencyKeyConflict("this Idempotency-Key was used for another session")
        return RunHandle(session_id=run.session_id, run_id=run.id, first_seq=run.first_seq, joined=True)


def scoped_key(caller: Caller, key: str | None) -> str | None:
    """An Idempotency-Key as stored: the caller's and the client's key together, so that two callers
    using the same key start two runs (a digest: the column holds 128 characters, a key up to 128).
    A full-trust service's key is stored as it comes, as the previous release stored every key: a
    retry that reaches a replica of the other release during an upgrade still joins its run."""
    if key is None or caller.full_trust:
        return key
    return hashlib.sha256(f"{caller.principal}\n{key}".encode()).hexdigest()


def _may_continue(caller: Caller, session: AgentSession, user: UserContext) -> bool:
    """A caller may run in a session it may see, for the user the session acts for (a full-trust
    service: as it always could, for whoever it names)."""
    if caller.full_trust:
        return True
    return caller.may_see(owner_of(session)) and (session.user_id, session.org_id) == (user.user_id, user.org_id)
