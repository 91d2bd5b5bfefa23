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
usage, the answer text so far, and ``seq``, the run's last event before the checkpoint. A run that
resumes after a question holds, from its claim on and until its first checkpoint, the answer it
resumes with (``resume_checkpoint``).

A call whose repetition is not harmless (``Tool.idempotent`` false) is made only once its TOOL_START
is durable (``effect_ahead``): after a crash, such a call whose TOOL_START is in the log may have run,
and one whose TOOL_START is not there has not. ``runs.continuation`` reads both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent_service.events.event_log import EventLog, SessionChannel
from agent_service.runs.state import Resume, RunState
from shared.protocol import AskUserKind

# Bumped when what a checkpoint holds changes in a way an older reader would misread.
VERSION = 1


def checkpoint_of(state: RunState, start_len: int, seq: int) -> dict[str, Any]:
    """``state`` as stored: what the run added to the ``start_len`` messages it started from."""
    return {
        **state.to_json(), "v": VERSION, "seq": seq,
        "added": [message.to_dict() for message in state.transcript[start_len:]],
        "answer": "".join(state.answer),
    }


def resume_checkpoint(resume: Resume) -> dict[str, Any]:
    """What a run that resumes after a question starts from besides the session's row: the answer."""
    return {"v": VERSION, "resume": {"kind": resume.kind.value, "text": resume.text, "approved": resume.approved}}


@dataclass(frozen=True, slots=True)
class Restored:
    """Where a continued run picks up: ``seq`` is the run's last event that stands (None: no step had
    ended, every event of the run is of the step that was cut); ``resume``: the answer it resumes with."""

    state: RunState
    seq: int | None
    resume: Resume | None


def restore(transcript: list[dict[str, Any]], run_state: dict[str, Any] | None,
            stored: dict[str, Any] | None) -> Restored:
    """The run as its checkpoint left it: the session's ``transcript`` and ``run_state`` (the run's start)
    and the run's ``stored`` checkpoint."""
    if stored is None or "seq" not in stored:
        answer = (stored or {}).get("resume")
        resume = None if answer is None else Resume(
            kind=AskUserKind(answer["kind"]), text=str(answer.get("text", "")), approved=bool(answer.get("approved")))
        return Restored(RunState.from_json(transcript, run_state), None, resume)
    state = RunState.from_json([*transcript, *stored.get("added", ())], stored)
    if stored.get("answer"):
        state.answer = [stored["answer"]]
    return Restored(state, int(stored["seq"]), None)


class RunCheckpoints:
    """The ``Steps`` of one run: its checkpoints go to the event log behind its events. ``channel``
    answers the run's live channel, None while it has none or once the run is not this process's."""

    __slots__ = ("_channel", "_log", "_start_len")

    def __init__(self, event_log: EventLog, channel: Callable[[], SessionChannel | None], start_len: int) -> None:
        self._log = event_log
        self._channel = channel
        self._start_len = start_len

    def ended(self, state: RunState) -> None:
        channel = self._channel()
        if channel is not None:
            self._log.checkpoint(channel, checkpoint_of(state, self._start_len, channel.next_seq - 1))

    async def effect_ahead(self) -> bool:
        """Wait until the run's events so far (its TOOL_START) are committed; False when they could not be."""
        channel = self._channel()
        return channel is not None and await self._log.durable(channel)
