"""The tool registry, and the ask_user spec the run engine intercepts."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from agent_service.runs.engine import find_tool
from agent_service.tools.ask_user import ASK_USER_TOOL_NAME, AskUserTool, validate_question
from agent_service.tools.base import ToolContext, ToolError
from agent_service.tools.calculator import CalculatorTool
from agent_service.tools.registry import ToolRegistry, UnknownToolError, build_registry
from shared.protocol import UserContext

CTX = ToolContext(session_id="s", run_id="r", user_context=UserContext(user_id="u"))


@pytest.fixture
async def sessionmaker():
    engine = create_async_engine("sqlite+aiosqlite:///:memory:")
    yield async_sessionmaker(engine)
    await engine.dispose()


async def test_build_registry_has_every_tool(sessionmaker) -> None:
    registry = build_registry(sessionmaker, artifact_max_bytes=1024)
    for name in ("calculator", "knowledge_search", "current_time", "ask_user", "create_file", "share_link",
                 "emit_data", "reply"):
        spec = registry.get(name).spec()
        assert spec.name == name and spec.parameters["type"] == "object" and spec.description
    assert find_tool(registry, "shell") is None
    assert isinstance(registry.get("calculator"), CalculatorTool)
    assert (await registry.get("calculator").run({"expression": "6*7"}, CTX))["result"] == 42


async def test_unknown_name_is_a_clear_error(sessionmaker) -> None:
    registry = build_registry(sessionmaker, artifact_max_bytes=1024)
    known = "unknown tool 'shell'; available tools: ask_user, calculator"
    with pytest.raises(UnknownToolError, match=known) as caught:
        registry.get("shell")
    # The model can be told, like any other tool failure.
    assert isinstance(caught.value, ToolError) and caught.value.name == "shell"


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ValueError, match="calculator"):
        ToolRegistry([CalculatorTool(), CalculatorTool()])


async def test_ask_user_is_a_spec_for_the_engine() -> None:
    tool = AskUserTool()
    assert tool.name == ASK_USER_TOOL_NAME == "ask_user"
    assert tool.spec().parameters["required"] == ["question"]
    with pytest.raises(ToolError, match="run engine must pause"):
        await tool.run({"question": "Where to?"}, CTX)
    assert validate_question({"question": "  Where to?  "}) == "Where to?"
    for bad in ({}, {"question": ""}, {"question": 3}, {"question": "x" * 1001}):
        with pytest.raises(ToolError):
            validate_question(bad)
