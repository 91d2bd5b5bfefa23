"""The calculator tool: its arguments, its result, and the evaluator's refusals as tool errors."""

from __future__ import annotations

import pytest

from agent_service.tools.base import ToolContext, ToolError
from agent_service.tools.calculator import CalculatorTool
from shared.arithmetic import MAX_EXPRESSION_CHARS
from shared.protocol import UserContext

CTX = ToolContext(session_id="s", run_id="r", user_context=UserContext(user_id="u"))


async def test_tool_returns_expression_and_result() -> None:
    assert await CalculatorTool().run({"expression": "17*23"}, CTX) == {"expression": "17*23", "result": 391}


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1/0", "division by zero"),
        ("2**100000", "exponent is too large"),
        ("x + 1", "unknown name 'x'"),
        ("1+" * MAX_EXPRESSION_CHARS + "1", "too long"),
        ("", "non-empty"),
    ],
)
async def test_refused_expressions_are_tool_errors_the_model_can_read(expression: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        await CalculatorTool().run({"expression": expression}, CTX)


async def test_tool_argument_validation() -> None:
    with pytest.raises(ToolError, match="'expression'"):
        await CalculatorTool().run({}, CTX)
    with pytest.raises(ToolError, match="'expression'"):
        await CalculatorTool().run({"expression": 42}, CTX)


def test_spec_is_a_json_schema_object() -> None:
    spec = CalculatorTool().spec()
    assert spec.name == "calculator"
    assert spec.parameters["required"] == ["expression"]
    assert spec.parameters["properties"]["expression"]["maxLength"] == MAX_EXPRESSION_CHARS
