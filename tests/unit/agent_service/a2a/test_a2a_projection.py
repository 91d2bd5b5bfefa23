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


def test_artifacts_are_in_the_order_they_appeared_and_each_is_one_whole_update() -> None:
    task = _task()
    first = task.apply(_event(1, "run-1", EventType.ARTIFACT, artifact_id="f1", name="a.txt", media_type="text/plain",
                              text="hé", description="notes"))
    task.apply(_event(2, "run-1", EventType.ANSWER_CHUNK, text="Done."))
    task.apply(_event(3, "run-1", EventType.ARTIFACT, artifact_id="d1", name="data.json",
                      media_type="application/json", data={"n": 1}))
    task.apply(_event(4, "run-1", EventType.ARTIFACT, artifact_id="l1", name="x.pdf", media_type="application/pdf",
                      url="https://example.com/x.pdf"))
    task.apply(_event(5, "run-1", EventType.COMPLETE, answer="Done."))

    assert [r.keys() for r in first] == [{"statusUpdate"}, {"artifactUpdate"}]  # working first, then the file
    update = first[1]["artifactUpdate"]
    assert (update["append"], update["lastChunk"], update["metadata"]) == (False, True, {"seq": 1, "event": "ARTIFACT"})
    artifacts = task.task()["artifacts"]
    assert [a["artifactId"] for a in artifacts] == ["f1", "run-1-answer", "d1", "l1"]
    assert artifacts[0] == {"artifactId": "f1", "name": "a.txt", "description": "notes",
                            "parts": [{"raw": "aMOp", "filename": "a.txt", "mediaType": "text/plain"}]}
    assert artifacts[2]["parts"] == [{"data": {"n": 1}, "mediaType": "application/json"}]
    assert artifacts[3]["parts"] == [{"url": "https://example.com/x.pdf", "filename": "x.pdf",
                                      "mediaType": "application/pdf"}]
    assert task.reply() is None and "message" not in task.task()["status"]


def test_a_direct_reply_is_the_final_status_message_with_what_the_run_made() -> None:
    task = _task()
    task.apply(_event(1, "run-1", EventType.ARTIFACT, artifact_id="f1", name="a.bin",
                      media_type="application/octet-stream", bytes="AAH/"))
    task.apply(_event(2, "run-1", EventType.ANSWER_CHUNK, text="Hi!"))
    assert task.reply() is None  # not whole yet
    task.apply(_event(3, "run-1", EventType.COMPLETE, answer="Hi!", direct=True))

    reply = task.reply()
    assert reply == task.task()["status"]["message"]
    assert reply["role"] == "ROLE_AGENT" and (reply["contextId"], reply["taskId"]) == ("ctx", "run-1")
    assert reply["parts"] == [{"text": "Hi!"}, {"raw": "AAH/", "filename": "a.bin",
                                                 "mediaType": "application/octet-stream"}]


def test_a_run_resumed_after_a_crash_replaces_the_answer_artifact_with_the_text_that_stands() -> None:
    """The step that was cut ("The ans") is done again: a subscriber's artifact is replaced (``append``
    false) by the text before it, the next chunks append to that, and the snapshot agrees."""
    task = _task()
    task.apply(_event(1, "run-1", EventType.ANSWER_CHUNK, text="Let me check. "))
    task.apply(_event(2, "run-1", EventType.TOOL_START, call_id="c1", tool="calculator", args={}))
    task.apply(_event(3, "run-1", EventType.TOOL_END, call_id="c1", tool="calculator", ok=True, result=42,
                      duration_ms=1.0))
    task.apply(_event(4, "run-1", EventType.ANSWER_CHUNK, text="The ans"))
    updates = task.apply(_event(1001, "run-1", EventType.RUN_RESUMED, checkpoint_seq=3, answer_chars=14,
                                continuation=1, step=1))
    replaced, status = updates[0]["artifactUpdate"], updates[1]["statusUpdate"]
    assert replaced["append"] is False and replaced["lastChunk"] is False
    assert replaced["artifact"]["parts"] == [{"text": "Let me check. "}]
    assert status["status"]["state"] == "TASK_STATE_WORKING"
    assert status["status"]["message"]["parts"][0] == {"text": "The agent restarted a step."}
    [appended] = task.apply(_event(1002, "run-1", EventType.ANSWER_CHUNK, text="The answer is 42."))
    assert appended["artifactUpdate"]["append"] is True
    task.apply(_event(1003, "run-1", EventType.COMPLETE, answer="Let me check. The answer is 42."))
    assert task.task()["artifacts"][0]["parts"] == [{"text": "Let me check. The answer is 42."}]


def test_a_resumed_answering_run_cuts_only_its_own_text() -> None:
    task = _task()
    task.apply(_event(1, "run-1", EventType.ANSWER_CHUNK, text="Where? "))
    task.apply(_event(2, "run-1", EventType.ASK_USER, question_id="q1", question="Where to?",
                      expires_at="2026-01-01T00:05:00Z"))
    task.apply(_event(3, "run-2", EventType.ANSWER_CHUNK, text="Lisb"))
    [replaced, _] = task.apply(_event(1001, "run-2", EventType.RUN_RESUMED, checkpoint_seq=2, answer_chars=0))
    assert replaced["artifactUpdate"]["artifact"]["parts"] == [{"text": "Where? "}]
