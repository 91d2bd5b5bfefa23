"""``TaskFold``: an A2A task's events as the chat's agent events (``EventEnvelope``), seqs ours.

The chat's ``AgentEventProcessor`` reads agent events; an A2A agent sends task events. The fold keeps
what the task has said so far and turns each A2A event into the agent events it means:

| A2A (spec 4.1, 4.2) | agent event |
|---|---|
| ``TASK_STATE_WORKING`` with a status message | ``THOUGHT`` (the page's progress line) |
| text parts of artifacts (``artifactUpdate``, ``append``/``lastChunk``) | ``ANSWER_CHUNK``: the text not delivered yet |
| an artifact sent again whose text is the start of what was delivered (the agent took text back: our own Agent Service does when it restarts a step) | ``RUN_RESUMED``: the reply's text is cut there |
| file, link or data parts of artifacts | ``ARTIFACT`` (once per part) |
| ``TASK_STATE_INPUT_REQUIRED`` | ``ASK_USER`` (the status message is the question) |
| ``TASK_STATE_COMPLETED``, or a ``Message`` instead of a task | ``COMPLETE`` (the answer: the artifacts' text, else the message's) |
| ``TASK_STATE_FAILED`` / ``_REJECTED`` / ``_AUTH_REQUIRED`` | ``ERROR`` ``A2A_FAILED`` / ``A2A_REJECTED`` / ``A2A_AUTH_REQUIRED`` |
| ``TASK_STATE_CANCELED`` | ``ERROR`` ``CANCELLED`` (the user's stop: the reply ends stopped) |

A2A has no resume cursor: a subscription starts with the task as it stands. The fold knows the text
already delivered (``delivered``: what this stream sent, or what the stored deltas of a taken-over
turn hold) and sends on only what the task's answer has beyond it, so a cut stream picked up again
loses no text and repeats none. The answer is the text of the task's artifacts in the order they
first appeared; an artifact sent again with ``append: false`` replaces its text.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import timedelta
from typing import Any

from pydantic import ValidationError

from conversation_service.a2a_agents import wire
from conversation_service.a2a_agents.wire import (
    ArtifactUpdate,
    DirectMessage,
    Status,
    StatusUpdate,
    StreamEvent,
    TaskSnapshot,
)
from conversation_service.agent_client.errors import AgentProtocolError
from shared.protocol import ArtifactData, EventEnvelope, EventType, utcnow

log = logging.getLogger(__name__)

# The chat's own question timeout caps this (``AgentEventProcessor``): A2A questions do not expire.
QUESTION_LIFETIME = timedelta(days=7)
DEFAULT_QUESTION = "The agent needs more information to continue."
CANCELLED = "CANCELLED"
# How far from a snapshot's end the chunks sent again after it may start.
REPLAY_WINDOW = 4
_ERRORS = {
    wire.FAILED: ("A2A_FAILED", True),
    wire.REJECTED: ("A2A_REJECTED", False),
    wire.AUTH_REQUIRED: ("A2A_AUTH_REQUIRED", False),
    wire.CANCELED: (CANCELLED, False),
}


class TaskFold:
    def __init__(self, *, delivered: str = "", last_seq: int = 0, context_id: str | None = None,
                 task_id: str | None = None, answered: str | None = None) -> None:
        self.delivered = delivered
        # The question this stream's message answers: the task still showing it (its first event,
        # before the agent has read the answer) is not asking again.
        self.answered = answered
        self.seq = last_seq
        self.context_id = context_id
        self.task_id = task_id
        self.ended = False
        self._texts: dict[str, str] = {}
        self._artifacts_sent: set[str] = set()
        self._parts_seen: dict[str, int] = {}
        # Per artifact of the last snapshot: its parts, and where the chunks repeating them have got.
        self._snapshot_tails: dict[str, tuple[list[dict[str, Any]], int | None]] = {}
        self._last_status: tuple[str, str | None, str] | None = None
        self._diverged = False

    @property
    def answer(self) -> str:
        return "".join(self._texts.values())

    def feed(self, event: StreamEvent) -> list[EventEnvelope]:
        """The agent events ``event`` means (none, one or several); nothing once the task ended."""
        if self.ended:
            return []
        if isinstance(event, DirectMessage):
            return self._direct(event)
        self._ids(event.context_id, event.task_id)
        if isinstance(event, TaskSnapshot):
            # The task as it stands: its artifacts replace what the fold had (a resumed stream).
            self._texts = {}
            self._snapshot_tails = {a.artifact_id: (a.parts, None) for a in event.artifacts}
            out = [e for artifact in event.artifacts for e in self._artifact(artifact, append=False)]
            return out + self._more_text() + self._status(event.status)
        if isinstance(event, ArtifactUpdate):
            if event.append and self._held_by_snapshot(event.artifact):
                return []
            return self._artifact(event.artifact, append=event.append) + self._more_text()
        assert isinstance(event, StatusUpdate)
        return self._status(event.status)

    def _ids(self, context_id: str | None, task_id: str | None) -> None:
        if context_id and self.context_id is None:
            self.context_id = context_id
        if task_id:
            if self.task_id is None:
                self.task_id = task_id
            elif task_id != self.task_id:
                raise AgentProtocolError("an event of another A2A task arrived on this stream")

    def _direct(self, message: DirectMessage) -> list[EventEnvelope]:
        self._ids(message.context_id, message.task_id)
        self._texts = {"message": message.text}
        return self._more_text() + self._end(EventType.COMPLETE, {"answer": self.answer})

    def _held_by_snapshot(self, artifact: wire.Artifact) -> bool:
        """Whether this appended chunk is one the last snapshot holds already.

        An agent may start sending a subscriber its events before it reads the task for the snapshot
        (the reference SDK does: no event is missed, but the few applied in between come twice), and
        A2A gives events no number to tell. So the first chunks after a snapshot that repeat the
        snapshot's last parts, in order (within ``REPLAY_WINDOW`` parts of its end), are taken as
        those; the end of the task, read whole after a resume (``A2ATaskStream``), settles the text."""
        tail = self._snapshot_tails.get(artifact.artifact_id)
        if tail is None:
            return False
        parts, at = tail
        size = len(artifact.parts)
        if at is None:  # the first chunk since the snapshot: where in its last parts does it start?
            at = next((i for i in range(len(parts) - size, max(len(parts) - REPLAY_WINDOW, 0) - 1, -1)
                       if i >= 0 and parts[i:i + size] == artifact.parts), None)
        elif parts[at:at + size] != artifact.parts:
            at = None
        if at is None or not size:
            del self._snapshot_tails[artifact.artifact_id]
            return False
        if at + size >= len(parts):
            del self._snapshot_tails[artifact.artifact_id]
        else:
            self._snapshot_tails[artifact.artifact_id] = (parts, at + size)
        return True

    def _artifact(self, artifact: wire.Artifact, *, append: bool) -> list[EventEnvelope]:
        text = wire.text_of(artifact.parts)
        if text or artifact.artifact_id in self._texts:
            self._texts[artifact.artifact_id] = (self._texts.get(artifact.artifact_id, "") if append else "") + text
        # A file, link or data part is sent once: numbered within its artifact, so the same part seen
        # again in a snapshot (a resumed stream) is known.
        out = []
        count = self._parts_seen.get(artifact.artifact_id, 0) if append else 0
        for part in artifact.parts:
            if "text" in part:
                continue
            key, count = f"{artifact.artifact_id}#{count}", count + 1
            if key in self._artifacts_sent:
                continue
            self._artifacts_sent.add(key)
            data = _artifact_data(artifact, part, key)
            if data is not None:
                out.append(self._event(EventType.ARTIFACT, data))
        self._parts_seen[artifact.artifact_id] = count
        return out

    def _more_text(self) -> list[EventEnvelope]:
        answer = self.answer
        if len(answer) < len(self.delivered) and self.delivered.startswith(answer):
            # The agent took text back (an artifact replaced by the start of its text): cut there.
            self.delivered = answer
            return [self._event(EventType.RUN_RESUMED, {"checkpoint_seq": self.seq, "answer_chars": len(answer)})]
        if len(answer) <= len(self.delivered):
            return []
        if not answer.startswith(self.delivered):
            # The agent rewrote text it had sent: what was shown stays; the end carries the final text.
            if not self._diverged:
                self._diverged = True
                log.warning("A2A answer text changed after it was shown", extra={"a2a_task_id": self.task_id})
            return []
        chunk, self.delivered = answer[len(self.delivered):], answer
        return [self._event(EventType.ANSWER_CHUNK, {"text": chunk})]

    def _status(self, status: Status) -> list[EventEnvelope]:
        key = (status.state, status.message_id, status.text)
        repeated, self._last_status = key == self._last_status, key
        if status.state == wire.WORKING:
            return [] if repeated or not status.text else [self._event(EventType.THOUGHT, {"text": status.text})]
        if status.state == wire.INPUT_REQUIRED:
            question_id = self._question_id(status)
            if question_id == self.answered:
                return []
            return self._end(EventType.ASK_USER, {
                "question_id": question_id, "question": status.text or DEFAULT_QUESTION,
                "expires_at": (utcnow() + QUESTION_LIFETIME).isoformat(), "kind": "question",
            })
        if status.state == wire.COMPLETED:
            if not self.answer and status.text:
                self._texts["status"] = status.text  # an agent that answers in the final status message
            return self._more_text() + self._end(EventType.COMPLETE, {"answer": self.answer})
        if status.state in _ERRORS:
            code, retryable = _ERRORS[status.state]
            return self._end(EventType.ERROR, {"code": code, "message": (status.text or status.state)[:2000],
                                               "retryable": retryable})
        return []  # SUBMITTED, or a state of a later version

    def _question_id(self, status: Status) -> str:
        """Stable for one question of one task (a resumed stream sees it again), within the 128
        characters of an id (task ids are the agent's and may be long)."""
        basis = f"{self.task_id}\0{status.message_id or status.timestamp or status.text}"
        return "a2a-" + hashlib.sha256(basis.encode()).hexdigest()[:40]

    def _end(self, type_: EventType, data: dict[str, Any]) -> list[EventEnvelope]:
        self.ended = True
        return [self._event(type_, data)]

    def _event(self, type_: EventType, data: dict[str, Any]) -> EventEnvelope:
        self.seq += 1
        return EventEnvelope(session_id=self.context_id or "", run_id=self.task_id or "", seq=self.seq, type=type_,
                             ts=utcnow(), data=data)


def _artifact_data(artifact: wire.Artifact, part: dict[str, Any], key: str) -> dict[str, Any] | None:
    """A file, link or data part as the chat's artifact; None (logged) when it is not one the chat shows."""
    name = part.get("filename") or artifact.name or artifact.artifact_id
    media = part.get("mediaType") or part.get("media_type")
    content: dict[str, Any]
    if isinstance(part.get("raw"), str):
        content = {"bytes": part["raw"], "media_type": media or "application/octet-stream"}
    elif isinstance(part.get("url"), str):
        content = {"url": part["url"], "media_type": media or "text/uri-list"}
    elif "data" in part:
        value = part["data"]
        content = {"data": value if isinstance(value, dict) else {"value": value}, "media_type": media or "application/json"}
    else:
        return None
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    try:
        return ArtifactData(artifact_id=f"a2a-{digest}", name=str(name)[:255], **content).model_dump()
    except ValidationError:
        log.warning("an A2A artifact part the chat cannot show was left out", extra={"artifact_name": str(name)[:64]})
        return None
