"""Arithmetic: finding the sum in a message and computing it with the ``calculator`` tool.

"that"/"it" stand for the last number of the previous answer ("what is that plus 9"). Without the
tool the model computes the sum itself, with the same bounded evaluator the tool uses.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from shared.arithmetic import ExpressionError, evaluate, parse
from shared.llm.base import LLMMessage
from shared.llm.builtin.skill import BuiltinReply, Skill, ToolResult, Turn

TOOL = "calculator"

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?", re.IGNORECASE)
_REFERENCE = re.compile(r"\b(?:that|it|this|the result|the answer|the previous result)\b", re.IGNORECASE)
_WORD_OPERATORS = [
    (re.compile(r"\bmultiplied by\b|\btimes\b", re.IGNORECASE), "*"),
    (re.compile(r"(?<=\d)\s*[x×]\s*(?=[\d(])", re.IGNORECASE), "*"),
    (re.compile(r"\bdivided by\b|\bover\b|÷", re.IGNORECASE), "/"),
    (re.compile(r"\bplus\b", re.IGNORECASE), "+"),
    (re.compile(r"\bminus\b", re.IGNORECASE), "-"),
    (re.compile(r"\bmod(?:ulo)?\b", re.IGNORECASE), "%"),
    (re.compile(r"\bto the power of\b|\braised to(?: the power of)?\b|\^", re.IGNORECASE), "**"),
    (re.compile(r"\s+squared\b", re.IGNORECASE), "**2"),
    (re.compile(r"\s+cubed\b", re.IGNORECASE), "**3"),
]
_COMMANDS = [
    (re.compile(r"\bmultiply\s+(\S+)\s+(?:by|and|with)\s+(\S+)", re.IGNORECASE), "{0}*{1}"),
    (re.compile(r"\bdivide\s+(\S+)\s+by\s+(\S+)", re.IGNORECASE), "{0}/{1}"),
    (re.compile(r"\badd\s+(\S+)\s+(?:to|and)\s+(\S+)", re.IGNORECASE), "{0}+{1}"),
    (re.compile(r"\bsubtract\s+(\S+)\s+from\s+(\S+)", re.IGNORECASE), "{1}-{0}"),
    (re.compile(r"\b(?:the\s+)?square root of\s+(\S+)", re.IGNORECASE), "sqrt({0})"),
    (re.compile(r"\b(?:double)\s+(\S+)", re.IGNORECASE), "{0}*2"),
]
_EXPRESSION = re.compile(r"(?:sqrt\(|-?\s*[\d(.])(?:sqrt\(|[\d\s.+\-*/%()])*")
_HAS_OPERATION = re.compile(r"\d\s*(?:\*\*|[-+*/%])\s*[-\d(.]|sqrt\(")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")


def _previous_number(history: Sequence[LLMMessage]) -> str | None:
    for m in reversed(history):
        if m.role == "assistant" and m.content.strip():
            numbers = _NUMBER.findall(_THOUSANDS.sub("", m.content))
            return numbers[-1] if numbers else None
    return None


def expression_in(text: str, history: Sequence[LLMMessage]) -> str | None:
    """The arithmetic expression in a message, with "that"/"it" standing for the previous answer."""
    base = text.strip().rstrip("?.!")
    found = _find_expression(base)
    if found is not None:
        return found
    previous = _previous_number(history)
    if previous is not None and _REFERENCE.search(base):
        return _find_expression(_REFERENCE.sub(f"({previous})" if previous.startswith("-") else previous, base))
    return None


def _find_expression(text: str) -> str | None:
    working = text
    for pattern, template in _COMMANDS:
        match = pattern.search(working)
        if match:
            parts = [p.strip(",;:") for p in match.groups()]
            working = working[: match.start()] + template.format(*parts) + working[match.end() :]
    for pattern, symbol in _WORD_OPERATORS:
        working = pattern.sub(symbol if symbol in ("**2", "**3") else f" {symbol} ", working)
    working = _THOUSANDS.sub("", working)
    best = None
    for match in _EXPRESSION.finditer(working):
        candidate = match.group(0).strip().rstrip(".")
        if _HAS_OPERATION.search(candidate) and _is_arithmetic(candidate):
            compact = re.sub(r"\s+", "", candidate)
            if best is None or len(compact) > len(best):
                best = compact
    return best


def _is_arithmetic(candidate: str) -> bool:
    try:
        parse(candidate)
    except ExpressionError:
        return False
    return True


def format_number(value: Any) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return format(value, ".10g")
    return str(value)


def respond(turn: Turn) -> BuiltinReply | None:
    expression = expression_in(turn.text, turn.history)
    if expression is None:
        return None
    if turn.offers(TOOL):
        reasoning = (f"The user wants to compute {expression}. I will use the {TOOL} tool to evaluate it "
                     "exactly.")
        return turn.call(TOOL, {"expression": expression}, reasoning=reasoning)
    try:
        return BuiltinReply(text=f"{expression} = {format_number(evaluate(expression))}.")
    except ExpressionError:
        return BuiltinReply(text=f"I can't compute {expression}: it is undefined or too large.")


def answer(result: ToolResult) -> str | None:
    if result.error is not None:
        what = f" {result.arguments['expression']}" if "expression" in result.arguments else ""
        return f"I couldn't complete that with the {TOOL} tool{what}: {result.error}"
    if not isinstance(result.value, (dict, int, float)):
        return None
    value = result.value.get("result") if isinstance(result.value, dict) else result.value
    return f"{result.arguments.get('expression', 'the expression')} = {format_number(value)}."


SKILL = Skill(respond, tool=TOOL, answer=answer)
