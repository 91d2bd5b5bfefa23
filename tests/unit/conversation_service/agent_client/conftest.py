from __future__ import annotations

import pytest

from conversation_service.agent_client import AgentServiceClient
from tests.unit.conversation_service.agent_client.sse_support import API_KEY, BASE_URL, FAST, RecordingSleep


@pytest.fixture
def recording_sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
async def client(recording_sleep: RecordingSleep):
    async with AgentServiceClient(BASE_URL, API_KEY, config=FAST, sleep=recording_sleep) as c:
        yield c
