"""A task, as A2A sees it, folded from the session's event log.

A task is the run a message started plus the runs that answered its questions: after a run ends
with ASK_USER, the session's next run can only be the one its answer starts (a new message is
refused while a question waits; an expired or cancelled question ends the paused run with an
ERROR of that run first). So the task is read straight from the log, with no state of its own:
``TaskProjection.apply`` takes the task's events in seq order and says what each one is on the
wire; ``task()`` is the Task object after the events applied so far. The stream and the
snapshot come from the same fold, so a subscriber's snapshot and the updates after it agree.

| event | A2A |
|---|---|
| THOUGHT, TOOL_START, TOOL_END, WAITING | status update WORKING, the event in its message |
| ANSWER_CHUNK | artifact ``answer``, appended chunk by chunk (``append``; ``lastChunk`` at the end) |
| ARTIFACT | an artifact of its own, whole in one update: a file, link or data part (``artifacts``) |
| RUN_RESUMED | the answer's text of the step that was cut goes: the ``answer`` artifact sent whole again (``append`` false: it replaces); status update WORKING saying the agent restarted a step |
| ASK_USER | status update INPUT_REQUIRED, the question in its message (and in the history) |
| COMPLETE | status update COMPLETED; a direct reply's carries the reply as its message |
| ERROR | FAILED; CANCELED for ``CANCELLED``; REJECTED for a request the agent refused |

Every update carries the event's ``seq`` in its ``metadata`` (the resume extension, ``card``).
A task's artifacts are in the order they first appeared.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agent_service.a2a.artifacts import a2a_artifact
from agent_service.a2a.schemas import TERMINAL_STATES, Role, TaskState
from shared.protocol import ArtifactData, ErrorCode, EventEnvelope, EventType

ANSWER_ARTIFACT = "answer"
RESTARTED = "The agent restarted a step."
# Runs that ended this way were refused rather than failed: the request was too large for the
# model, or the organisation's rate limit would have made it wait too long.
_REFUSED = frozenset({ErrorCode.TOKEN_LIMIT_EXCEEDED.value, ErrorCode.RATE_LIMITED.value})

StreamResponse = dict[str, Any]


def timestamp(value: datetime) -> str:
    """ProtoJSON time: UTC, milliseconds, ``Z`` (spec 5.6.1)."""
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _state_after_error(code: str) -> TaskState:
    if code == ErrorCode.CANCELLED.value:
        return TaskState.CANCELED
    return TaskState.REJECTED if code in _REFUSED else TaskState.FAILED


@dataclass
class TaskProjection:
    """``task_id`` is the id of the run that started the task; ``created`` its start; ``context_id`` the
    context as its client names it, held by the session ``session_id`` (the same id, unless another
    caller's session already had it: ``a2a.contexts``)."""

    task_id: str
    context_id: str
    created: datetime
    session_id: str = ""
    state: TaskState = TaskState.SUBMITTED
    status_ts: datetime | None = None
    status_message: dict[str, Any] | None = None
    answer: list[str] = field(default_factory=list)
    # Where the answer's chunks of the run the task takes now begin (a RUN_RESUMED cuts that run's text).
    run_answer_from: int = 0
    # The artifacts tools made (A2A objects), and where among them the answer's stands.
    made: list[dict[str, Any]] = field(default_factory=list)
    answer_at: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    # The seq of the last event applied (0: none yet).
    last_seq: int = 0
    # The run whose events the task takes now; after its ASK_USER, the next run's too.
    run_id: str | None = None
    paused: bool = False
    # The question the task waits for an answer to (INPUT_REQUIRED).
    question_id: str | None = None
    artifact_open: bool = False
    # The run ended with a direct reply: a client that waited gets it as a Message.
    direct: bool = False

    def __post_init__(self) -> None:
        if self.run_id is None:
            self.run_id = self.task_id

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def accepts(self, env: EventEnvelope) -> bool:
        """Whether ``env`` is this task's: its run's, or the run that answered its question."""
        if self.terminal or env.seq <= self.last_seq:
            return False
        return env.run_id == self.run_id or self.paused

    def apply(self, env: EventEnvelope) -> list[StreamResponse]:
        """Fold ``env`` in; the stream responses it is (none for an event of another task)."""
        if not self.accepts(env):
            return []
        if env.run_id != self.run_id:
            self.run_id, self.paused = env.run_id, False
            self.run_answer_from = len(self.answer)
        self.last_seq = env.seq
        handler = _HANDLERS[env.type]
        return handler(self, env)

    # --- the wire objects ----------------------------------------------------------------------

    def task(self, history_length: int | None = None, *, artifacts: bool = True) -> dict[str, Any]:
        status: dict[str, Any] = {"state": self.state.value, "timestamp": timestamp(self.status_ts or self.created)}
        if self.status_message is not None:
            status["message"] = self.status_message
        task: dict[str, Any] = {"id": self.task_id, "contextId": self.context_id, "status": status}
        if artifacts:
            task["artifacts"] = self.artifacts()
        history = self.history if history_length is None else self.history[-history_length:] if history_length else []
        if history:
            task["history"] = history
        task["metadata"] = {"seq": self.last_seq}
        return task

    def artifacts(self) -> list[dict[str, Any]]:
        if not self.answer:
            return list(self.made)
        return [*self.made[: self.answer_at], self._artifact("".join(self.answer)), *self.made[self.answer_at:]]

    def reply(self) -> dict[str, Any] | None:
        """The Message a direct reply is (its text, and what the run made as parts), once it is whole."""
        return self.status_message if self.direct and self.state is TaskState.COMPLETED else None

    def _artifact(self, text: str) -> dict[str, Any]:
        return {"artifactId": f"{self.task_id}-{ANSWER_ARTIFACT}", "name": ANSWER_ARTIFACT, "parts": [{"text": text}]}

    def _message(self, env: EventEnvelope, parts: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "messageId": f"{self.context_id}-{env.seq}", "role": Role.AGENT.value, "parts": parts,
            "contextId": self.context_id, "taskId": self.task_id,
        }

    def _status(self, env: EventEnvelope, state: TaskState, parts: list[dict[str, Any]] | None) -> StreamResponse:
        self.state, self.status_ts = state, env.ts
        self.status_message = self._message(env, parts) if parts else None
        status: dict[str, Any] = {"state": state.value, "timestamp": timestamp(env.ts)}
        if self.status_message is not None:
            status["message"] = self.status_message
        return {"statusUpdate": {
            "taskId": self.task_id, "contextId": self.context_id, "status": status, "metadata": _meta(env),
        }}

    def _chunk(self, env: EventEnvelope, text: str, *, last: bool) -> StreamResponse:
        update = {
            "taskId": self.task_id, "contextId": self.context_id, "artifact": self._artifact(text),
            "append": self.artifact_open, "lastChunk": last, "metadata": _meta(env),
        }
        self.artifact_open = not last
        return {"artifactUpdate": update}

    def _whole_answer(self, env: EventEnvelope) -> StreamResponse:
        """The answer artifact with all its text, replacing what a client holds (``append`` false)."""
        update = {
            "taskId": self.task_id, "contextId": self.context_id, "artifact": self._artifact("".join(self.answer)),
            "append": False, "lastChunk": False, "metadata": _meta(env),
        }
        self.artifact_open = True
        return {"artifactUpdate": update}

    def _working(self, env: EventEnvelope) -> list[StreamResponse]:
        """A status update WORKING when the task was not working yet (it starts, or resumes)."""
        return [] if self.state is TaskState.WORKING else [self._status(env, TaskState.WORKING, None)]

    def _close_answer(self, env: EventEnvelope) -> list[StreamResponse]:
        # The chunk that says the answer is whole; A2A wants a part in it, so an empty one.
        return [self._chunk(env, "", last=True)] if self.artifact_open else []


def _meta(env: EventEnvelope) -> dict[str, Any]:
    return {"seq": env.seq, "event": env.type.value}


def _on_thought(p: TaskProjection, env: EventEnvelope) -> list[StreamResponse]:
    return [p._status(env, TaskState.WORKING, [{"text": str(env.data.get("text", ""))}])]


def _on_tool_start(p: TaskProjection, env: EventEnvelope) -> list[StreamResponse]:
    data = {"callId": env.data.get("call_id"), "tool": env.data.get("tool"), "args": env.data.get("args", {})}
    return [p._status(env, TaskState.WORKING, [{"text": f"Calling {data['tool']}"}, {"data": data}])]


def _on_tool_end(p: TaskProjection, env: EventEnvelope) -> list[StreamResponse]:
    data = {
        "callId": env.data.get("call_id"), "tool": env.data.get("tool"), "ok": env.data.get("ok"),
        "durationMs": env.data.get("duration_ms"),
    }
    data["result" if data["ok"] else "error"] = env.data.get("result" if data["ok"] else "error")
    return [p._status(env, TaskState.WORKING, [{"data": data}])]


def _on_waiting(p: TaskProjection, env: EventEnvelope) -> list[StreamResponse]:
    data = {"waitS": env.data.get("wait_s"), "limit": env.data.get("limit")}
    return [p._status(env, TaskState.WORKING, [{"text": str(env.data.get("reason", ""))}, {"data": data}])]


def _on_chunk(p: TaskProjection, env: EventEnvelope) -> list[StreamResponse]:
    text = str(env.data.get("text", ""))
    out = p._working(env)
    if not p.answer:
        p.answer_at = len(p.made)
    p.answer.append(text)
    out.append(p._chunk(env, text, last=False))
    return out


def _on_resumed(p: TaskProjection, env: EventEnvelope) -> list[StreamResponse]:
    """The run went on after its process died: its answer text after its last step goes (that step is
    done again), so a client's artifact is replaced by the text that stands."""
    keep = int(env.data.get("answer_chars", 0))
    run_text = "".join(p.answer[p.run_answer_from:])
    out = []
    if len(run_text) > keep:
        p.answer = [*p.answer[: p.run_answer_from], run_text[:keep]]
        out.append(p._whole_answer(env))
    data = {"resumedAfterSeq": env.data.get("checkpoint_seq"), "continuation": env.data.get("continuation")}
    out.append(p._status(env, TaskState.WORKING, [{"text": RESTARTED}, {"data": data}]))
    return out


def _on_artifact(p: TaskProjection, env: EventEnvelope) -> list[StreamResponse]:
    artifact = a2a_artifact(ArtifactData.model_validate(env.data))
    out = p._working(env)
    p.made.append(artifact)
    out.append({"artifactUpdate": {
        "taskId": p.task_id, "contextId": p.context_id, "artifact": artifact, "append": False, "lastChunk": True,
        "metadata": _meta(env),
    }})
    return out


def _on_ask_user(p: TaskProjection, env: EventEnvelope) -> list[StreamResponse]:
    question = {
        "questionId": env.data.get("question_id"), "kind": env.data.get("kind", "question"),
        "expiresAt": env.data.get("expires_at"),
    }
    if env.data.get("tool") is not None:
        question |= {"tool": env.data.get("tool"), "args": env.data.get("args")}
    out = p._close_answer(env)
    out.append(p._status(env, TaskState.INPUT_REQUIRED, [{"text": str(env.data.get("question", ""))},
                                                          {"data": question}]))
    p.history.append(p.status_message)
    p.paused, p.question_id = True, env.data.get("question_id")
    return out


def _on_complete(p: TaskProjection, env: EventEnvelope) -> list[StreamResponse]:
    out = p._close_answer(env)
    p.direct = bool(env.data.get("direct"))
    reply = None
    if p.direct:
        made = [part for artifact in p.made for part in artifact["parts"]]
        reply = [{"text": str(env.data.get("answer", ""))}, *made]
    out.append(p._status(env, TaskState.COMPLETED, reply))
    return out


def _on_error(p: TaskProjection, env: EventEnvelope) -> list[StreamResponse]:
    code = str(env.data.get("code", ErrorCode.INTERNAL.value))
    data = {"code": code, "retryable": bool(env.data.get("retryable", False))}
    if env.data.get("retry_after_s") is not None:
        data["retryAfterS"] = env.data["retry_after_s"]
    out = p._close_answer(env)
    out.append(p._status(env, _state_after_error(code), [{"text": str(env.data.get("message", ""))}, {"data": data}]))
    p.paused = False
    return out


_HANDLERS = {
    EventType.THOUGHT: _on_thought,
    EventType.TOOL_START: _on_tool_start,
    EventType.TOOL_END: _on_tool_end,
    EventType.WAITING: _on_waiting,
    EventType.ANSWER_CHUNK: _on_chunk,
    EventType.ARTIFACT: _on_artifact,
    EventType.RUN_RESUMED: _on_resumed,
    EventType.ASK_USER: _on_ask_user,
    EventType.COMPLETE: _on_complete,
    EventType.ERROR: _on_error,
}
