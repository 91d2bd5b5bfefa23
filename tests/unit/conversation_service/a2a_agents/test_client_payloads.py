"""What the A2A client reads from a remote agent: a NUL in it (which PostgreSQL cannot store in the
reply) arrives as U+FFFD, one character for one; JSON that is not JSON is a protocol error."""

from __future__ import annotations

import orjson
import pytest

from conversation_service.a2a_agents.client import event_payload
from conversation_service.a2a_agents.fold import TaskFold
from conversation_service.a2a_agents.wire import parse_stream_response
from conversation_service.agent_client.errors import AgentProtocolError


def test_a_streamed_nul_reaches_the_fold_as_the_replacement_character() -> None:
    update = {"artifactUpdate": {"taskId": "t1", "contextId": "c1", "append": False,
                                 "artifact": {"artifactId": "answer", "parts": [{"text": "a\x00b"}]}}}
    payload = event_payload(orjson.dumps(update).decode())
    events = TaskFold().feed(parse_stream_response(payload))
    assert [(e.type.value, e.data) for e in events] == [("ANSWER_CHUNK", {"text": "a\ufffdb"})]


def test_an_event_without_a_nul_is_read_as_it_is_and_one_that_is_not_json_is_refused() -> None:
    assert event_payload('{"x": "\\\\u0000 is text here"}') == {"x": "\\u0000 is text here"}
    with pytest.raises(AgentProtocolError):
        event_payload("not json")
