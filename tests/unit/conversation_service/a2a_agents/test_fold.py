"""``TaskFold``: an A2A task's events as the chat's agent events, and a resumed stream that sends on
only the text not delivered yet."""

from __future__ import annotations

from conversation_service.a2a_agents.fold import TaskFold
from conversation_service.a2a_agents.wire import parse_stream_response
from shared.protocol import EventType


def task(state: str, *chunks: str, status_text: str | None = None) -> dict:
    status: dict = {"state": state}
    if status_text is not None:
        status["message"] = {"messageId": "s1", "role": "ROLE_AGENT", "parts": [{"text": status_text}]}
    artifacts = [{"artifactId": "answer", "parts": [{"text": c} for c in chunks]}] if chunks else []
    return {"task": {"id": "t1", "contextId": "c1", "status": status, "artifacts": artifacts}}


def status(state: str, text: str | None = None, message_id: str = "m1") -> dict:
    body: dict = {"state": state}
    if text is not None:
        body["message"] = {"messageId": message_id, "role": "ROLE_AGENT", "parts": [{"text": text}]}
    return {"statusUpdate": {"taskId": "t1", "contextId": "c1", "status": body}}


def chunk(text: str, *, append: bool = True, artifact: str = "answer") -> dict:
    return {"artifactUpdate": {"taskId": "t1", "contextId": "c1", "append": append,
                               "artifact": {"artifactId": artifact, "parts": [{"text": text}]}}}


def feed(fold: TaskFold, *responses: dict) -> list[tuple[str, dict]]:
    return [(e.type.value, e.data) for r in responses for e in fold.feed(parse_stream_response(r))]


def test_a_streamed_task_becomes_progress_answer_chunks_and_its_end() -> None:
    fold = TaskFold()
    events = feed(fold, task("TASK_STATE_SUBMITTED"), status("TASK_STATE_WORKING", "Searching"),
                  chunk("Hel", append=False), chunk("lo"), status("TASK_STATE_COMPLETED"))
    assert events == [("THOUGHT", {"text": "Searching"}), ("ANSWER_CHUNK", {"text": "Hel"}),
                      ("ANSWER_CHUNK", {"text": "lo"}), ("COMPLETE", {"answer": "Hello"})]
    assert (fold.context_id, fold.task_id, fold.seq, fold.ended) == ("c1", "t1", 4, True)
    assert feed(fold, chunk("more")) == []  # nothing after the end


def test_a_resumed_stream_sends_only_the_text_not_delivered() -> None:
    # Delivered "Hel" (then the connection was cut); the agent had sent "lo wor" meanwhile.
    fold = TaskFold(delivered="Hel", last_seq=7, context_id="c1", task_id="t1")
    events = feed(fold, task("TASK_STATE_WORKING", "Hel", "lo wor", status_text="Searching"), chunk("ld"),
                  status("TASK_STATE_COMPLETED"))
    assert events == [("ANSWER_CHUNK", {"text": "lo wor"}), ("THOUGHT", {"text": "Searching"}),
                      ("ANSWER_CHUNK", {"text": "ld"}), ("COMPLETE", {"answer": "Hello world"})]
    assert fold.seq == 11  # our seqs go on from the stored one
    # The same snapshot again (a second cut) adds nothing.
    again = TaskFold(delivered="Hello wor", context_id="c1", task_id="t1")
    assert feed(again, task("TASK_STATE_WORKING", "Hel", "lo wor")) == []


def test_a_question_is_asked_once_and_not_again_by_the_stream_of_its_answer() -> None:
    fold = TaskFold()
    [(kind, data)] = feed(fold, status("TASK_STATE_INPUT_REQUIRED", "Which city?", message_id="s1"))
    assert kind == "ASK_USER" and data["question"] == "Which city?" and data["kind"] == "question"
    assert data["question_id"].startswith("a2a-") and len(data["question_id"]) <= 128
    answer = TaskFold(task_id="t1", answered=data["question_id"])
    # The task still shows the question until the agent reads the answer.
    events = feed(answer, task("TASK_STATE_INPUT_REQUIRED", status_text="Which city?"),
                  chunk("Paris", append=False), status("TASK_STATE_COMPLETED"))
    assert [k for k, _ in events] == ["ANSWER_CHUNK", "COMPLETE"]


def test_the_final_status_message_is_the_answer_when_no_artifact_has_text() -> None:
    events = feed(TaskFold(), status("TASK_STATE_COMPLETED", "Hello from the status"))
    assert events == [("ANSWER_CHUNK", {"text": "Hello from the status"}),
                      ("COMPLETE", {"answer": "Hello from the status"})]


def test_a_message_instead_of_a_task_is_the_whole_answer() -> None:
    events = feed(TaskFold(), {"message": {"messageId": "m", "role": "ROLE_AGENT", "contextId": "c9",
                                           "parts": [{"text": "Hi!"}]}})
    assert events == [("ANSWER_CHUNK", {"text": "Hi!"}), ("COMPLETE", {"answer": "Hi!"})]


def test_failed_rejected_and_canceled_tasks_end_with_an_error() -> None:
    assert feed(TaskFold(), status("TASK_STATE_FAILED", "tool crashed")) == [
        ("ERROR", {"code": "A2A_FAILED", "message": "tool crashed", "retryable": True})]
    assert feed(TaskFold(), status("TASK_STATE_REJECTED"))[0][1]["code"] == "A2A_REJECTED"
    assert feed(TaskFold(), status("TASK_STATE_CANCELED"))[0][1]["code"] == "CANCELLED"  # the user's stop
    assert feed(TaskFold(), status("TASK_STATE_AUTH_REQUIRED"))[0][1]["code"] == "A2A_AUTH_REQUIRED"


def test_files_links_and_data_become_artifacts_once() -> None:
    update = {"artifactUpdate": {"taskId": "t1", "contextId": "c1", "artifact": {
        "artifactId": "out", "name": "report", "parts": [
            {"raw": "aGk=", "mediaType": "text/plain", "filename": "hi.txt"},
            {"url": "https://example.com/r.pdf", "mediaType": "application/pdf"},
            {"data": {"count": 42}},
            {"url": "javascript:alert(1)"},  # not a link the page may show: left out
        ]}}}
    fold = TaskFold()
    events = feed(fold, update)
    assert [(k, d["name"], d.get("bytes") or d.get("url") or d.get("data")) for k, d in events] == [
        ("ARTIFACT", "hi.txt", "aGk="), ("ARTIFACT", "report", "https://example.com/r.pdf"),
        ("ARTIFACT", "report", {"count": 42})]
    assert all(k == EventType.ARTIFACT.value for k, _ in events)
    # A resumed stream's snapshot holds them again: none is sent twice.
    snapshot = {"task": {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_WORKING"},
                         "artifacts": [update["artifactUpdate"]["artifact"]]}}
    assert feed(fold, snapshot) == []


def test_chunks_sent_again_right_after_a_snapshot_are_not_shown_twice() -> None:
    # The agent read the task for the snapshot after it had queued "w2 " and "w3 " for us.
    fold = TaskFold(delivered="w0 ", context_id="c1", task_id="t1")
    events = feed(fold, task("TASK_STATE_WORKING", "w0 ", "w1 ", "w2 ", "w3 "), chunk("w2 "), chunk("w3 "),
                  chunk("w4 "), chunk("w3 "))  # after the snapshot's tail, a repeat is the agent's own text
    assert [d["text"] for _, d in events] == ["w1 w2 w3 ", "w4 ", "w3 "]


def test_a_new_chunk_after_a_snapshot_is_shown() -> None:
    fold = TaskFold(delivered="", context_id="c1", task_id="t1")
    events = feed(fold, task("TASK_STATE_WORKING", "a", "b"), chunk("c"), chunk("b"))
    assert [d["text"] for _, d in events] == ["ab", "c", "b"]


def test_text_the_agent_takes_back_is_cut_from_the_reply() -> None:
    """Our own Agent Service, restarting a step, replaces its answer artifact by the text that stands:
    the chat's reply is cut there (RUN_RESUMED), and what follows is appended once."""
    fold = TaskFold()
    events = feed(fold, chunk("Let me ", append=False), chunk("check. The ans"), chunk("Let me check. ", append=False),
                  chunk("The answer is 42."), status("TASK_STATE_COMPLETED"))
    assert events == [("ANSWER_CHUNK", {"text": "Let me "}), ("ANSWER_CHUNK", {"text": "check. The ans"}),
                      ("RUN_RESUMED", {"checkpoint_seq": 2, "answer_chars": len("Let me check. ")}),
                      ("ANSWER_CHUNK", {"text": "The answer is 42."}),
                      ("COMPLETE", {"answer": "Let me check. The answer is 42."})]
