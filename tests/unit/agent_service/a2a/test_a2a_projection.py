"""The fold of a task from the event log: which events are the task's, and what each one is in A2A."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent_service.a2a.projection import TaskProjection
from agent_service.a2a.schemas import TaskState
from shared.protocol import EventEnvelope, EventType

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _event(seq: int, run_id: str, type_: EventType, **data) -> EventEnvelope:
    return EventEnvelope(session_id="ctx", run_id=run_id, seq=seq, type=type_, ts=T0, data=data)


def _task() -> TaskProjection:
    return TaskProjection(task_id="run-1", context_id="ctx", created=T0)


def test_the_answering_run_continues_the_task_and_a_later_run_is_another_task() -> None:
    task = _task()
    task.apply(_event(1, "run-1", EventType.ANSWER_CHUNK, text="Where "))
    task.apply(_event(2, "run-1", EventType.ASK_USER, question_id="q1", question="Where to?",
                      expires_at="2026-01-01T00:05:00Z"))
    assert (task.state, task.question_id) == (TaskState.INPUT_REQUIRED, "q1")

    task.apply(_event(3, "run-2", EventType.ANSWER_CHUNK, text="Lisbon"))
    task.apply(_event(4, "run-2", EventType.COMPLETE, answer="Where Lisbon"))
    assert task.apply(_event(5, "run-3", EventType.ANSWER_CHUNK, text="next task")) == []

    snapshot = task.task()
    assert snapshot["status"]["state"] == "TASK_STATE_COMPLETED"
    assert snapshot["artifacts"] == [{"artifactId": "run-1-answer", "name": "answer",
                                      "parts": [{"text": "Where Lisbon"}]}]
    assert [m["parts"][0]["text"] for m in snapshot["history"]] == ["Where to?"]
    assert snapshot["metadata"] == {"seq": 4}
    assert task.task(history_length=0).get("history") is None


def test_a_run_after_a_finished_one_is_not_the_task() -> None:
    task = _task()
    task.apply(_event(1, "run-1", EventType.COMPLETE, answer=""))
    assert task.apply(_event(2, "run-2", EventType.THOUGHT, text="new")) == []
    assert task.last_seq == 1


@pytest.mark.parametrize(("code", "state"), [
    ("CANCELLED", TaskState.CANCELED), ("RATE_LIMITED", TaskState.REJECTED),
    ("TOKEN_LIMIT_EXCEEDED", TaskState.REJECTED), ("INTERRUPTED", TaskState.FAILED), ("LLM_ERROR", TaskState.FAILED),
])
def test_an_error_ends_the_task_in_the_state_its_code_says(code: str, state: TaskState) -> None:
    task = _task()
    task.apply(_event(1, "run-1", EventType.ANSWER_CHUNK, text="part"))
    updates = task.apply(_event(2, "run-1", EventType.ERROR, code=code, message="why", retryable=False))

    assert updates[0]["artifactUpdate"]["lastChunk"] is True
    status = updates[1]["statusUpdate"]["status"]
    assert status["state"] == state.value and status["message"]["parts"][1]["data"]["code"] == code
    assert task.terminal


def test_each_update_carries_its_seq_and_a_tool_call_is_working() -> None:
    task = _task()
    [start] = task.apply(_event(7, "run-1", EventType.TOOL_START, call_id="c1", tool="calculator", args={"x": 1}))
    [end] = task.apply(_event(8, "run-1", EventType.TOOL_END, call_id="c1", tool="calculator", ok=True,
                              result=42, duration_ms=3.0))

    assert start["statusUpdate"]["metadata"] == {"seq": 7, "event": "TOOL_START"}
    assert start["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
    assert end["statusUpdate"]["status"]["message"]["parts"][0]["data"]["result"] == 42
    assert end["statusUpdate"]["status"]["timestamp"] == "2026-01-01T00:00:00.000Z"
