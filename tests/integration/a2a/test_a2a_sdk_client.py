"""The reference A2A SDK's client (a2a-sdk) against our server, over both bindings.

It resolves our Agent Card, parses every answer into the SDK's protobuf types (so our wire format
is checked by the SDK's own parser), streams a task that asks a question, answers it with the
task's id, and reads the task back.
"""

from __future__ import annotations

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)

from tests.integration.a2a.conftest import API_KEY


def _message(text: str, message_id: str, **ids: str) -> SendMessageRequest:
    return SendMessageRequest(message=Message(role=Role.ROLE_USER, message_id=message_id, parts=[Part(text=text)], **ids))


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_the_sdk_client_streams_a_task_that_asks_and_finishes_it_with_the_answer(a2a_url: str, binding: str) -> None:
    async with httpx.AsyncClient(headers={"X-API-Key": API_KEY}, timeout=30.0) as http:
        config = ClientConfig(httpx_client=http, supported_protocol_bindings=[binding], streaming=True)
        client = await create_client(a2a_url, client_config=config)

        asked = [event async for event in client.send_message(_message("plan a trip", f"sdk-{binding}-1"))]
        task = asked[0].task
        assert asked[-1].status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        question = asked[-1].status_update.status.message.parts[0].text
        assert question.strip()

        answered = [
            event async for event in client.send_message(
                _message("Lisbon, for 3 days", f"sdk-{binding}-2", task_id=task.id, context_id=task.context_id)
            )
        ]
        streamed = "".join(
            part.text for event in answered if event.HasField("artifact_update")
            for part in event.artifact_update.artifact.parts
        )
        assert answered[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED

        final = await client.get_task(GetTaskRequest(id=task.id, history_length=5))
        assert final.status.state == TaskState.TASK_STATE_COMPLETED
        assert [part.text for part in final.artifacts[0].parts] == [streamed] and "Lisbon" in streamed
        assert [m.parts[0].text for m in final.history] == [question]
        listed = await client.list_tasks(ListTasksRequest(context_id=task.context_id))
        assert [t.id for t in listed.tasks] == [task.id] and listed.next_page_token == ""
