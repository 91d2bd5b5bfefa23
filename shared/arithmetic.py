"""Safe arithmetic: the one evaluator behind the ``calculator`` tool and the built-in model.

Nothing reaches ``eval``: the ``ast`` tree is checked against a whitelist, then walked to a value.
Length, nesting depth, exponents and every intermediate result are bounded, so a hostile expression
cannot burn CPU or memory; every refusal is an ``ExpressionError`` saying what is wrong.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

MAX_EXPRESSION_CHARS = 200
MAX_DEPTH = 30
MAX_EXPONENT = 1000
MAX_MAGNITUDE = 10**100  # a googol: far beyond any sensible answer, cheap to compute with
_TOO_LARGE = "the result is too large (more than 10**100)"

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt, "abs": abs, "round": round, "floor": math.floor, "ceil": math.ceil, "log": math.log,
    "log10": math.log10, "exp": math.exp, "sin": math.sin, "cos": math.cos, "tan": math.tan,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}


class ExpressionError(ValueError):
    """The expression is not arithmetic, or its value is undefined or out of bounds."""


def parse(expression: str) -> ast.expr:
    """The checked syntax tree of ``expression`` (``^`` read as ``**``); nothing is evaluated."""
    try:
        tree = ast.parse(expression.strip().replace("^", "**"), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"not a valid arithmetic expression: {exc.msg}") from None
    _check_node(tree.body, 0)
    return tree.body


def evaluate(expression: str) -> int | float:
    """The value of ``expression``, or ``ExpressionError`` saying what is wrong with it."""
    if not isinstance(expression, str) or not expression.strip():
        raise ExpressionError("expression must be a non-empty string")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"expression is too long (at most {MAX_EXPRESSION_CHARS} characters)")
    tree = parse(expression)
    try:
        return _bounded(_value(tree))
    except ExpressionError:
        raise
    except ZeroDivisionError:
        raise ExpressionError("division by zero") from None
    except OverflowError:
        raise ExpressionError("the result is too large") from None
    except (ValueError, TypeError) as exc:
        raise ExpressionError(f"math error: {exc}") from None


def _check_node(node: ast.AST, depth: int) -> None:
    """Refuse anything that is not a number, an allowed name, an arithmetic operator or an allowed call."""
    if depth > MAX_DEPTH:
        raise ExpressionError("expression is nested too deeply")
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ExpressionError("only numbers are allowed")
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        _check_node(node.operand, depth + 1)
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        _check_node(node.left, depth + 1)
        _check_node(node.right, depth + 1)
    elif isinstance(node, ast.Name):
        if node.id not in _CONSTANTS:
            raise ExpressionError(
                f"unknown name {node.id!r}; only numbers, operators and {', '.join(_FUNCTIONS)} are allowed"
            )
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            raise ExpressionError(f"only these functions are allowed: {', '.join(_FUNCTIONS)}")
        if node.keywords or not 1 <= len(node.args) <= 2:
            raise ExpressionError(f"{node.func.id}() takes one or two positional arguments")
        for arg in node.args:
            _check_node(arg, depth + 1)
    elif isinstance(node, ast.Attribute):
        raise ExpressionError("attribute access is not allowed")
    else:
        raise ExpressionError(f"{type(node).__name__} is not allowed in an arithmetic expression")


def _bounded(value: Any) -> int | float:
    if isinstance(value, complex):
        raise ExpressionError("the result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ExpressionError("the result is not a finite number")
    if abs(value) > MAX_MAGNITUDE:
        raise ExpressionError(_TOO_LARGE)
    return value


def _value(node: ast.AST) -> Any:
    """The value of a tree ``parse`` has checked; every intermediate result is bounded."""
    if isinstance(node, ast.Constant):
        return _bounded(node.value)
    if isinstance(node, ast.UnaryOp):
        value = _value(node.operand)
        return -value if isinstance(node.op, ast.USub) else +value
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ExpressionError(f"exponent is too large (at most {MAX_EXPONENT})")
        if isinstance(node.op, ast.Pow) and left != 0 and right * math.log10(abs(left)) > 100:
            # Refuse before computing: 999**999 is cheap to reject and expensive to build.
            raise ExpressionError(_TOO_LARGE)
        return _bounded(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.Name):
        return _CONSTANTS[node.id]
    # ``parse`` let nothing else through: this is a call of a whitelisted function.
    name, args = node.func.id, [_value(arg) for arg in node.args]
    if name == "round" and len(args) == 2 and not isinstance(args[1], int):
        raise ExpressionError("round()'s second argument must be an integer")
    if name == "round" and len(args) == 2 and abs(args[1]) > 100:
        raise ExpressionError("round() precision is out of range")
    if name == "exp" and args[0] > 230:
        raise ExpressionError(_TOO_LARGE)
    return _bounded(_FUNCTIONS[name](*args))
