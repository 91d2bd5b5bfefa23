"""The real Agent Service on loopback (SQLite and PostgreSQL) for the client's integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_service.app import create_app
from agent_service.settings import AgentServiceSettings
from agent_service.tools.ask_user import AskUserTool
from agent_service.tools.base import Tool
from agent_service.tools.calculator import CalculatorTool
from agent_service.tools.current_time import CurrentTimeTool
from shared.llm.builtin import BuiltinProvider
from tests.integration.agent_client.fault_proxy import API_KEY
from tests.support.servers import serve_app

# The client is what is under test: a profile with the tools that need no document index.
PROFILES = """
profiles:
  - name: default
    description: Calculates, tells the time and asks when a detail is missing.
    system_prompt: You are a helpful assistant.
    tools: [calculator, current_time, ask_user]
    max_steps: 8
    max_tokens: 1024
    max_context_tokens: 64000
"""


class _Tools:
    def __init__(self, *tools: Tool) -> None:
        self._tools = {tool.name: tool for tool in tools}

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)


@pytest.fixture
async def agent_service_url(database_url: str, tmp_path: Path):
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(PROFILES)
    settings = AgentServiceSettings(
        database_url=database_url,
        api_keys=[API_KEY],
        migrate_on_start=True,
        profiles_file=profiles,
        heartbeat_seconds=0.2,
    )
    # Paced so a run lasts long enough for a connection to break in the middle of it.
    provider = BuiltinProvider(first_token_delay=0, chunk_delay=0.01)
    app = create_app(settings, provider=provider, tools=_Tools(CalculatorTool(), CurrentTimeTool(), AskUserTool()))
    async with serve_app(app) as url:
        yield url
