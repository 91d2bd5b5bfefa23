"""A run's checkpoint: where it stands at the end of each step, durable with that step's events.

A step ends when a model turn that called tools is complete, and when each of those calls has its
result. The engine says so (``RunContext.steps.ended``); ``RunCheckpoints`` queues the run's state for
the event log's group commit right behind the step's events (``EventLog.checkpoint``), so it is written
in the transaction of the last of them or a later one: a recovery never finds a state ahead of the
log, and what the log holds after a checkpoint is the step that was cut. A step that ends the run (a
model turn without tool calls, a direct reply, a question) needs none: the terminal write holds the
state. Nothing is written per answer chunk, and no transaction of its own: one UPDATE of the run's row
inside a group commit that is written anyway (one statement per batch on PostgreSQL).

What is stored is what the run added to its start (the session's row keeps the transcript the run
started from until the run ends): the transcript's messages since, the calls still to make, steps,
usage, the answer text so far, the user it acts for (a new message may say other permissions than the
session's first), and ``seq``, the run's last event before the checkpoint. From its claim on and until
its first checkpoint, a run holds what a continuation would otherwise lack (``start_checkpoint``): the
answer it resumes with, the user it acts for when not the session's.

A call whose repetition is not harmless (``Tool.idempotent`` false) is made only once its TOOL_START
is durable (``effect_ahead``): after a crash, such a call whose TOOL_START is in the log may have run,
and one whose TOOL_START is not there has not. ``runs.continuation`` reads both.

A graceful stop hands its runs over (``hand_over``) rather than ending them: their events and checkpoints
written, their leases given up, so that the next sweep of any replica (this one restarted included)
continues each from its last checkpoint, as after a crash but at once and with no hole in its seqs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import async_sessionmaker

from agent_service.events.event_log import EventLog, SessionChannel
from agent_service.repository import RunRepository, SessionRepository
from agent_service.runs.state import Resume, RunState
from shared.protocol import AskUserKind, UserContext
from shared.transactions import transaction

# Bumped when what a checkpoint holds changes in a way an older reader would misread.
VERSION = 1


def checkpoint_of(state: RunState, start_len: int, seq: int, user: dict[str, Any] | None = None) -> dict[str, Any]:
    """``state`` as stored: what the run added to the ``start_len`` messages it started from."""
    stored = {
        **state.to_json(), "v": VERSION, "seq": seq,
        "added": [message.to_dict() for message in state.transcript[start_len:]],
        "answer": "".join(state.answer),
    }
    if user is not None:
        stored["user_context"] = user
    return stored


def start_checkpoint(resume: Resume | None, user: UserContext, session_user: dict[str, Any]) -> dict[str, Any] | None:
    """What a run holds from its claim on, when the session's row does not say it: the answer it resumes
    with, the user it acts for (``session_user``: the session's). None: nothing (most runs)."""
    stored: dict[str, Any] = {}
    if resume is not None:
        stored["resume"] = {"kind": resume.kind.value, "text": resume.text, "approved": resume.approved}
    user_json = user.model_dump(mode="json")
    if user_json != session_user:
        stored["user_context"] = user_json
    return {"v": VERSION, **stored} if stored else None


@dataclass(frozen=True, slots=True)
class Restored:
    """Where a continued run picks up: ``seq`` is the run's last event that stands (None: no step had
    ended, every event of the run is of the step that was cut); ``resume``: the answer it resumes with;
    ``user``: the user it acts for (None: the session's)."""

    state: RunState
    seq: int | None
    resume: Resume | None
    user: dict[str, Any] | None = None


def restore(transcript: list[dict[str, Any]], run_state: dict[str, Any] | None,
            stored: dict[str, Any] | None) -> Restored:
    """The run as its checkpoint left it: the session's ``transcript`` and ``run_state`` (the run's start)
    and the run's ``stored`` checkpoint."""
    stored = stored or {}
    user = stored.get("user_context")
    if "seq" not in stored:
        answer = stored.get("resume")
        resume = None if answer is None else Resume(
            kind=AskUserKind(answer["kind"]), text=str(answer.get("text", "")), approved=bool(answer.get("approved")))
        return Restored(RunState.from_json(transcript, run_state), None, resume, user)
    state = RunState.from_json([*transcript, *stored.get("added", ())], stored)
    if stored.get("answer"):
        state.answer = [stored["answer"]]
    return Restored(state, int(stored["seq"]), None, user)


class RunCheckpoints:
    """The ``Steps`` of one run: its checkpoints go to the event log behind its events. ``channel``
    answers the run's live channel, None while it has none or once the run is not this process's;
    ``user``: the user the run acts for."""

    __slots__ = ("_channel", "_log", "_start_len", "_user", "_user_json")

    def __init__(
        self, event_log: EventLog, channel: Callable[[], SessionChannel | None], start_len: int, user: UserContext,
    ) -> None:
        self._log = event_log
        self._channel = channel
        self._start_len = start_len
        self._user = user
        self._user_json: dict[str, Any] | None = None  # dumped at the first checkpoint: most runs have none

    def ended(self, state: RunState) -> None:
        channel = self._channel()
        if channel is None:
            return
        if self._user_json is None:
            self._user_json = self._user.model_dump(mode="json")
        self._log.checkpoint(channel, checkpoint_of(state, self._start_len, channel.next_seq - 1, self._user_json))

    async def effect_ahead(self) -> bool:
        """Wait until the run's events so far (its TOOL_START) are committed; False when they could not be."""
        channel = self._channel()
        return channel is not None and await self._log.durable(channel)


async def hand_over(sessionmaker: async_sessionmaker, event_log: EventLog, channel: SessionChannel, owner_id: str) -> bool:
    """Leave a run this process executes to whichever replica's sweep comes next, without ending it:
    every event it emitted written (its checkpoints with them), then its lease given up and its seq
    reservation closed at its last event. Its live readers are cut off; they resume from the log. False
    when its events could not all be written: its lease then runs out as after a crash, and it is
    continued from its last durable checkpoint, above the reservation."""
    try:
        if not await event_log.durable(channel):
            return False
        async with transaction(sessionmaker) as db:
            if not await RunRepository(db).release(channel.run_id, owner_id):
                return False  # not this process's any more
            await SessionRepository(db).close_reservation(channel.session_id, channel.run_id, channel.next_seq - 1)
        return True
    finally:
        event_log.abandon(channel)
