"""Continuing a run whose process died, from its last checkpoint, in this process.

The lease sweep (``runs.leases``, start-up recovery included) finds runs whose owner stopped renewing
their lease. One with a cancel request ends CANCELLED, and one whose session moved on is closed, as
before; one that was continued ``max_continuations`` times already, or whose profile is gone, ends
ERROR INTERRUPTED as before. Any other is continued here, under the same run id and session:

1. ``claim``, in the sweep's transaction: the run's row becomes this process's, with a fresh lease and
   one more continuation (a conditional UPDATE: one replica each); the session's seq reservation moves
   above every seq the dead process may have shown; the run's checkpoint is read (``checkpoints``),
   and the TOOL_STARTs its log holds after it;
2. ``launch``, once that committed: a channel at the session's next seq, whose first event is
   RUN_RESUMED (where the run picks up: clients drop the answer text of the step that was cut), and the
   run handed to the ``RunManager`` as any other. Its events, its lease, a cancel and its end are then
   those of an ordinary run; its owner and everything else on its rows stay as they were.

The step that was cut is done again: a model turn in flight is asked again from the checkpoint. A
tool call whose TOOL_START is in the log after the checkpoint has no result there (the checkpoint
after a call is written with its TOOL_END), so it may or may not have run: a tool that says a repeated
call is harmless (``Tool.idempotent``) is called again; any other is not, its TOOL_END says that its
outcome is unknown (the user sees it on the tool's card), the model reads the same as the call's
result, and the run goes on. A completed call is never made again: its result is in the checkpoint.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from agent_service.access.caller import Owner
from agent_service.errors import ProfileNotFound
from agent_service.events.event_log import EventLog
from agent_service.metrics import AgentMetrics
from agent_service.models import AgentSession, next_seq, owner_of
from agent_service.profiles.schemas import Profile
from agent_service.profiles.service import ProfileStore
from agent_service.repository import EventRepository, OrphanRun, RunRepository, SessionRepository
from agent_service.runs.checkpoints import Restored, checkpoint_of, restore
from agent_service.runs.engine import ToolLookup, find_tool
from agent_service.runs.manager import ActiveRun, RunManager
from agent_service.runs.schemas import RunHandle
from agent_service.runs.state import Resume, RunState, answer_call
from shared.llm.base import ToolCall
from shared.protocol import EventType, RunResumedData, ToolEndData, UserContext

log = logging.getLogger(__name__)

UNKNOWN_OUTCOME = (
    "the agent restarted while this call was running, so whether it took effect is unknown; it was not "
    "made again. Do not assume it succeeded or failed: say so, or check before calling it again."
)


@dataclass(frozen=True, slots=True)
class Continuation:
    """A run claimed to be continued here: what ``launch`` starts it from."""

    handle: RunHandle
    # Where its events go on: the session's next seq, and the reservation the claim set.
    next_seq: int
    reserved: int
    profile: Profile
    user_context: UserContext
    # Whom the session belongs to: the continued run acts for it as the dead one did.
    owner: Owner
    state: RunState
    start_transcript: list[dict[str, Any]]
    resume: Resume | None
    resumed: RunResumedData
    # Calls that may have run and are not made again: each gets its TOOL_END after RUN_RESUMED.
    unknown: tuple[ToolCall, ...]
    linked_trace: str | None


class RunContinuation:
    def __init__(
        self, *, manager: RunManager, event_log: EventLog, profiles: ProfileStore, tools: ToolLookup,
        metrics: AgentMetrics, max_continuations: int,
    ) -> None:
        self._manager = manager
        self._log = event_log
        self._profiles = profiles
        self._tools = tools
        self._metrics = metrics
        self.max_continuations = max_continuations

    async def claim(
        self, db: AsyncSession, orphan: OrphanRun, session: AgentSession, now: datetime,
    ) -> Continuation | None:
        """Take ``orphan`` (the current run of ``session``, read for update in ``db``) over to continue
        it; None when it is not to be continued (no continuations left, its profile gone) or another
        replica took it first: the caller then ends it if it still can."""
        if self.max_continuations < 1:
            return None
        try:
            profile = self._profiles.get(session.profile_name)
        except ProfileNotFound:
            return None
        run = await RunRepository(db).claim_to_continue(
            orphan.run_id, self._manager.owner_id, now, self._manager.lease_until(now), self.max_continuations)
        if run is None:
            return None
        restored = restore(session.transcript, session.run_state, run.checkpoint)
        after = restored.seq if restored.seq is not None else run.first_seq - 1
        started = await EventRepository(db).of_run(session.id, orphan.run_id, after, EventType.TOOL_START)
        resume, unknown = self._cut_step(restored, profile, {str(data.get("call_id")) for data in started})
        state = restored.state
        # After every seq the dead process may have shown: its unwritten events leave a hole.
        first = next_seq(session)
        reserved = first - 1 + self._log.seq_block
        await SessionRepository(db).set(session, seq_reserved=reserved, updated_at=now)
        resumed = RunResumedData(checkpoint_seq=after, answer_chars=len("".join(state.answer)),
                                 continuation=run.continuations, step=state.steps)
        return Continuation(
            handle=RunHandle(session_id=session.id, run_id=orphan.run_id, first_seq=run.first_seq),
            next_seq=first, reserved=reserved, profile=profile,
            user_context=UserContext.model_validate(restored.user or session.user_context), owner=owner_of(session),
            state=state,
            start_transcript=list(session.transcript or []), resume=resume, resumed=resumed, unknown=unknown,
            linked_trace=run.traceparent,
        )

    def _cut_step(
        self, restored: Restored, profile: Profile, started: set[str],
    ) -> tuple[Resume | None, tuple[ToolCall, ...]]:
        """The call in flight when the process died, if its TOOL_START is logged: made again when
        that is harmless, else answered with its unknown outcome (the answer to an approval that
        asked for it is then spent too). Only the first pending call can be in flight: calls run in
        order, each after the checkpoint of the one before."""
        state = restored.state
        if not state.pending_calls or state.pending_calls[0].id not in started:
            return restored.resume, ()
        call = state.pending_calls[0]
        tool = find_tool(self._tools, call.name) if call.name in profile.tools else None
        if tool is None or tool.idempotent:
            return restored.resume, ()
        state.pending_calls.pop(0)
        answer_call(state, call, UNKNOWN_OUTCOME)
        return None, (call,)

    def launch(self, continuation: Continuation) -> None:
        """Start the claimed run in this process: RUN_RESUMED, then the TOOL_END of each call whose
        outcome is unknown (and a checkpoint after them), then the run from where it stands."""
        c = continuation
        if self._manager.shutting_down:
            # Its lease runs out soon: a replica that stays (or this one restarted) continues it.
            return
        channel = self._log.open_channel(c.handle.session_id, c.handle.run_id, c.next_seq, reserved=c.reserved)
        self._log.emit(channel, EventType.RUN_RESUMED, c.resumed)
        for call in c.unknown:
            self._log.emit(channel, EventType.TOOL_END, ToolEndData(
                call_id=call.id, tool=call.name, ok=False, error=UNKNOWN_OUTCOME, duration_ms=0.0))
        if c.unknown:
            self._log.checkpoint(channel, checkpoint_of(c.state, len(c.start_transcript), channel.next_seq - 1,
                                                        c.user_context.model_dump(mode="json")))
        run = ActiveRun.of(c.handle, c.profile, c.user_context, c.state, c.resume, channel, c.owner,
                           start_transcript=c.start_transcript)
        run.linked_trace = c.linked_trace
        self._manager.start(run)
        self._metrics.runs_continued.inc()
        log.warning("orphaned run continued", extra={
            "run_id": c.handle.run_id, "session_id": c.handle.session_id, "continuation": c.resumed.continuation,
            "checkpoint_seq": c.resumed.checkpoint_seq, "unknown_calls": len(c.unknown)})
