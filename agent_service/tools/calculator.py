"""``calculator``: exact arithmetic with the bounded evaluator of ``shared.arithmetic``."""

from __future__ import annotations

from typing import Any, ClassVar

from agent_service.tools.base import Tool, ToolContext, ToolError
from shared.arithmetic import MAX_EXPRESSION_CHARS, ExpressionError, evaluate


class CalculatorTool(Tool):
    name = "calculator"
    idempotent = True
    description = (
        "Evaluate an arithmetic expression exactly. Supports numbers, + - * / // % ** (or ^), "
        "parentheses, pi, e and the functions sqrt, abs, round, floor, ceil, log, log10, exp, sin, cos, tan."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "expression": {
                "type": "string",
                "description": "The expression, e.g. 17*23 or (2+3)**2",
                "maxLength": MAX_EXPRESSION_CHARS,
            }
        },
        "required": ["expression"],
        "additionalProperties": False,
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        expression = args.get("expression")
        if not isinstance(expression, str):
            raise ToolError("'expression' (a string) is required")
        try:
            value = evaluate(expression)
        except ExpressionError as exc:
            raise ToolError(str(exc)) from None
        return {"expression": expression, "result": value}
