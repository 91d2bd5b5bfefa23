"""``calculator``: exact arithmetic by walking the expression's syntax tree.

Nothing is ever passed to ``eval``/``exec``: the expression is parsed with ``ast`` and only
numbers, the arithmetic operators, parentheses and a few named math functions are evaluated.
Every dimension is bounded so a hostile expression cannot burn CPU or memory: its length, its
nesting depth, exponents, and the magnitude of every intermediate result.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any, ClassVar

from agent_service.tools.base import Tool, ToolContext, ToolError

MAX_EXPRESSION_CHARS = 200
MAX_DEPTH = 30
MAX_EXPONENT = 1000
MAX_MAGNITUDE = 10**100  # a googol: far beyond any sensible answer, cheap to compute with

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "abs": abs,
    "round": round,
    "floor": math.floor,
    "ceil": math.ceil,
    "log": math.log,
    "log10": math.log10,
    "exp": math.exp,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}


def evaluate(expression: str) -> int | float:
    """The value of ``expression``, or ``ToolError`` saying what is wrong with it."""
    if not isinstance(expression, str) or not expression.strip():
        raise ToolError("expression must be a non-empty string")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"expression is too long (at most {MAX_EXPRESSION_CHARS} characters)")
    try:
        tree = ast.parse(expression.strip().replace("^", "**"), mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"not a valid arithmetic expression: {exc.msg}") from None
    try:
        return _check(_eval(tree.body, 0))
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except OverflowError:
        raise ToolError("the result is too large") from None
    except (ValueError, TypeError) as exc:
        raise ToolError(f"math error: {exc}") from None


def _check(value: Any) -> int | float:
    if isinstance(value, complex):
        raise ToolError("the result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("the result is not a finite number")
    if abs(value) > MAX_MAGNITUDE:
        raise ToolError("the result is too large (more than 10**100)")
    return value


def _eval(node: ast.AST, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise ToolError("expression is nested too deeply")
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ToolError("only numbers are allowed")
        return _check(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _eval(node.operand, depth + 1)
        return -value if isinstance(node.op, ast.USub) else +value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left = _eval(node.left, depth + 1)
        right = _eval(node.right, depth + 1)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ToolError(f"exponent is too large (at most {MAX_EXPONENT})")
        if isinstance(node.op, ast.Pow) and left != 0 and right * math.log10(abs(left)) > 100:
            # Refuse before computing: 999**999 is cheap to reject and expensive to build.
            raise ToolError("the result is too large (more than 10**100)")
        return _check(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise ToolError(f"unknown name {node.id!r}; only numbers, operators and {', '.join(_FUNCTIONS)} are allowed")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            raise ToolError(f"only these functions are allowed: {', '.join(_FUNCTIONS)}")
        if node.keywords or not 1 <= len(node.args) <= 2:
            raise ToolError(f"{node.func.id}() takes one or two positional arguments")
        args = [_eval(arg, depth + 1) for arg in node.args]
        if node.func.id == "round" and len(args) == 2 and not isinstance(args[1], int):
            raise ToolError("round()'s second argument must be an integer")
        if node.func.id == "round" and len(args) == 2 and abs(args[1]) > 100:
            raise ToolError("round() precision is out of range")
        if node.func.id == "exp" and args[0] > 230:
            raise ToolError("the result is too large (more than 10**100)")
        return _check(_FUNCTIONS[node.func.id](*args))
    if isinstance(node, ast.Attribute):
        raise ToolError("attribute access is not allowed")
    raise ToolError(f"{type(node).__name__} is not allowed in an arithmetic expression")


class CalculatorTool(Tool):
    name = "calculator"
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
        value = evaluate(expression)
        return {"expression": expression, "result": value}
