"""``EarlyModelCall``: a new message's model call, started before its run's claim has committed.

The model's time to first token then covers the claim's read, writes and commit, which otherwise
came before the call. A new message to a session whose last run this process completed starts
even before the session is read, from that run's transcript (``snapshots``); the read then
confirms it or the call is dropped and started again from the session as read. The run writes
nothing until ``confirm`` (its claim committed); every other way out of the claim (a joined retry,
a refused execute, a lost race) ends in ``discard``, and the run leaves no trace.
"""

from __future__ import annotations

import asyncio
from enum import Enum
from typing import Self

from agent_service.access.caller import Caller, Owner
from agent_service.events.event_log import SessionChannel
from agent_service.events.snapshots import SessionSnapshot
from agent_service.models import AgentSession
from agent_service.profiles.schemas import Profile
from agent_service.runs.manager import ActiveRun, RunManager
from agent_service.runs.schemas import RunHandle
from agent_service.runs.state import RunState
from shared.admission import Slot
from shared.protocol import ExecuteRequest


class _Status(Enum):
    IDLE = "no call running"
    SPECULATIVE = "running from the remembered transcript, the session not read yet"
    STARTED = "running from the session as read"
    CONFIRMED = "the claim committed: the run is the session's"
    DISCARDED = "stopped without a trace"


class EarlyModelCall:
    """Used as a context manager: a call not confirmed when the claim is over is discarded. Not
    ``enabled`` (a run that must wait for its place first), it starts nothing."""

    def __init__(
        self, manager: RunManager, request: ExecuteRequest, session_id: str, run_id: str, *, caller: Caller,
        enabled: bool = True,
    ) -> None:
        self._manager = manager
        self._caller = caller
        self._request = request
        self._session_id = session_id
        self.run_id = run_id
        self._enabled = enabled
        self._status = _Status.IDLE
        self._run: ActiveRun | None = None
        self._snapshot: SessionSnapshot | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.discard()

    @property
    def started(self) -> bool:
        return self._status is _Status.STARTED

    def start_from_snapshot(self, profile: Profile) -> None:
        """Start from the transcript this process's last run of the session left, if it has one."""
        assert self._status is _Status.IDLE
        if not self._enabled:
            return
        snapshot = self._manager.snapshots.take(self._session_id)
        # Another caller's session is not continued, not even speculatively: its claim would refuse it.
        if snapshot is not None and snapshot.owner is not None and self._caller.may_see(snapshot.owner):
            self._snapshot = snapshot
            state = RunState.continued(snapshot.transcript, self._request)
            self._launch(state, snapshot.last_seq + 1, profile, snapshot.owner)
            self._status = _Status.SPECULATIVE

    def state_for(self, session: AgentSession) -> RunState | None:
        """The running call's state when the session as read is still as the snapshot says (nothing
        ran or changed it since); else None, and a call from the snapshot is dropped."""
        if self._status is not _Status.SPECULATIVE:
            return None
        assert self._snapshot is not None and self._run is not None
        if self._snapshot.matches(session):
            self._status = _Status.STARTED
            return self._run.state
        self._stop()
        self._status = _Status.IDLE
        return None

    def start(self, state: RunState, first_seq: int, profile: Profile, owner: Owner) -> None:
        """Start from the session as read (a new session: from the request)."""
        assert self._status is _Status.IDLE
        if not self._enabled:
            return
        self._launch(state, first_seq, profile, owner)
        self._status = _Status.STARTED

    def confirm(self, handle: RunHandle, channel: SessionChannel, place: Slot | None = None) -> None:
        """The claim has committed: the run goes on as the session's, writing to ``channel``, and
        gives ``place`` back when it ends."""
        assert self._status is _Status.STARTED and self._run is not None and self._run.claimed is not None
        self._run.handle, self._run.channel, self._run.place = handle, channel, place
        self._manager.adopt(self._run)
        self._run.claimed.set_result(None)
        self._status = _Status.CONFIRMED

    def discard(self) -> None:
        """Stop a call whose claim failed (nothing once confirmed)."""
        if self._status is not _Status.CONFIRMED:
            self._stop()
            self._status = _Status.DISCARDED

    def _launch(self, state: RunState, first_seq: int, profile: Profile, owner: Owner) -> None:
        handle = RunHandle(session_id=self._session_id, run_id=self.run_id, first_seq=first_seq)
        self._run = ActiveRun.of(handle, profile, self._request.user_context, state, owner=owner)
        self._run.claimed = asyncio.get_running_loop().create_future()
        self._manager.launch(self._run)

    def _stop(self) -> None:
        if self._status in (_Status.SPECULATIVE, _Status.STARTED):
            assert self._run is not None and self._run.claimed is not None and self._run.task is not None
            self._run.claimed.cancel()
            self._run.task.cancel()
