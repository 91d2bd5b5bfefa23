"""The built-in offline model: deterministic, streams like a real one, calls tools, asks questions.

It is the default provider, so the product runs end to end without any external model, and it is
what the tests drive. It reads the transcript the way a small instruction-following model would:

* the system prompt ``SUMMARIZE_SYSTEM_PROMPT`` -> an extractive summary of the conversation given;
* tool results after the last user message -> a final answer built from them;
* otherwise the last user message picks a behaviour: remembering and recalling the user's name,
  telling the time (``current_time``), searching the docs (``knowledge_search``), planning a trip
  (asking for the destination with ``ask_user`` when it is missing), arithmetic (``calculator``,
  "that"/"it" meaning the last number of the previous answer), or a short fixed reply.

A tool is only called when it is offered in ``tools``; without it the model answers in text. Its
reasoning before a tool call streams as ``ReasoningDelta``, the answer as ``TextDelta``, after a
first-token delay and in small chunks with a delay between them (both configurable, 0 allowed).
Identical input gives identical output, tool-call ids included.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import math
import operator
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from shared.llm.base import (
    SUMMARIZE_SYSTEM_PROMPT,
    CompletionOptions,
    LLMDone,
    LLMEvent,
    LLMMessage,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolSpec,
)
from shared.tokens import count_messages_tokens, count_tokens, truncate_to_tokens

__all__ = ["BuiltinProvider", "BuiltinReply", "decide"]

CALCULATOR = "calculator"
KNOWLEDGE_SEARCH = "knowledge_search"
CURRENT_TIME = "current_time"
ASK_USER = "ask_user"

TRIP_QUESTION = "Where would you like to go, and for how many days?"
SELF_DESCRIPTION = (
    "I'm the built-in offline model: I can do arithmetic, search the project's documents, tell the "
    "time, plan a trip and remember what you tell me in this conversation."
)
MAX_TRIP_DAYS = 14
DEFAULT_TRIP_DAYS = 3
MAX_SUMMARY_CHARS = 600


@dataclass(frozen=True)
class BuiltinReply:
    """What the model decided to say: reasoning, answer text and tool calls (any may be empty)."""

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = field(default_factory=tuple)


class BuiltinProvider:
    name = "builtin"

    def __init__(self, *, first_token_delay: float = 0.15, chunk_delay: float = 0.015, chunk_words: int = 1) -> None:
        if first_token_delay < 0 or chunk_delay < 0 or chunk_words < 1:
            raise ValueError("delays must be >= 0 and chunk_words >= 1")
        self.first_token_delay = first_token_delay
        self.chunk_delay = chunk_delay
        self.chunk_words = chunk_words

    async def aclose(self) -> None:
        return None

    async def stream(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[ToolSpec] = (),
        options: CompletionOptions = CompletionOptions(),
    ) -> AsyncIterator[LLMEvent]:
        reply = decide(messages, [tool.name for tool in tools])
        text = reply.text
        if options.max_tokens is not None and count_tokens(text) > options.max_tokens:
            text = truncate_to_tokens(text, options.max_tokens)
        # Pacing is the simulated model's latency, so the product's streaming is visible end to end.
        await asyncio.sleep(self.first_token_delay)
        first = True
        for kind, piece in [(ReasoningDelta, p) for p in _chunks(reply.reasoning, self.chunk_words)] + [
            (TextDelta, p) for p in _chunks(text, self.chunk_words)
        ]:
            if not first:
                await asyncio.sleep(self.chunk_delay)
            first = False
            yield kind(piece)
        for call in reply.tool_calls:
            yield call
        generated = reply.reasoning + text + "".join(orjson.dumps(c.arguments).decode() for c in reply.tool_calls)
        yield LLMDone(
            prompt_tokens=count_messages_tokens([(m.role, m.content) for m in messages]),
            completion_tokens=count_tokens(generated),
            finish_reason="tool_calls" if reply.tool_calls else "stop",
        )


def _chunks(text: str, words: int) -> list[str]:
    """Split keeping every character (whitespace stays attached), a few characters/words a chunk."""
    if not text:
        return []
    tokens = re.findall(r"\S+\s*|\s+", text)
    return ["".join(tokens[i : i + words]) for i in range(0, len(tokens), words)]


# --------------------------------------------------------------------------------------------
# Decisions


def decide(messages: Sequence[LLMMessage], tool_names: Sequence[str] = ()) -> BuiltinReply:
    """The model's whole behaviour as a pure function of the transcript and the offered tools."""
    available = set(tool_names)
    if any(m.role == "system" and m.content.strip() == SUMMARIZE_SYSTEM_PROMPT for m in messages):
        return BuiltinReply(text=_summarize([m for m in messages if m.role != "system"]))

    last_user = _last_index(messages, "user")
    after = list(messages[last_user + 1 :]) if last_user >= 0 else list(messages)
    results = [m for m in after if m.role == "tool"]
    if results:
        return _answer_from_tools(messages, last_user, after, results, available)
    if last_user < 0:
        return BuiltinReply(text=f"Hello! {SELF_DESCRIPTION} What can I do for you?")
    user_text = messages[last_user].content.strip()
    history = list(messages[:last_user])
    seed = _seed(messages)
    for rule in (_name_rules, _time_rule, _trip_rule, _arithmetic_rule, _search_rule, _small_talk_rule):
        reply = rule(user_text, history, available, seed)
        if reply is not None:
            return reply
    return BuiltinReply(text=_fallback(user_text))


def _last_index(messages: Sequence[LLMMessage], role: str) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == role:
            return i
    return -1


def _seed(messages: Sequence[LLMMessage]) -> str:
    digest = hashlib.sha256()
    for m in messages:
        digest.update(orjson.dumps(m.to_dict(), option=orjson.OPT_SORT_KEYS))
    return digest.hexdigest()


def _call(name: str, arguments: dict[str, Any], seed: str, index: int = 0) -> ToolCall:
    # Derived from the transcript so the same input gives the same call, and a new turn a new id.
    return ToolCall(id=f"call_{hashlib.sha256(f'{seed}:{index}:{name}'.encode()).hexdigest()[:24]}",
                    name=name, arguments=arguments)


# ---- names ----------------------------------------------------------------------------------

# Only the prefix is case-insensitive: a second name must be capitalised ("Ada Lovelace", not "Ada and").
_NAME_STATEMENT = re.compile(r"\b(?i:my name is|my name's|call me)\s+([A-Za-z][\w'-]*(?:\s+[A-Z][\w'-]*)?)")
_NAME_QUESTION = re.compile(r"\b(?:what(?:'s| is) my name|who am i|do you (?:know|remember) my name)\b", re.IGNORECASE)


def _known_name(history: Sequence[LLMMessage]) -> str | None:
    name = None
    for m in history:
        if m.role in ("user", "system"):  # system: a summary of older history may carry it
            for match in _NAME_STATEMENT.finditer(m.content):
                name = match.group(1)
    return _title(name) if name else None


def _title(name: str) -> str:
    return " ".join(part[:1].upper() + part[1:] for part in name.split())


def _name_rules(text: str, history: list[LLMMessage], available: set[str], seed: str) -> BuiltinReply | None:
    if _NAME_QUESTION.search(text):
        name = _known_name(history)
        if name:
            return BuiltinReply(text=f"Your name is {name}.")
        return BuiltinReply(text="You haven't told me your name yet. What should I call you?")
    match = _NAME_STATEMENT.search(text)
    if match:
        return BuiltinReply(text=f"Nice to meet you, {_title(match.group(1))}! I'll remember your name.")
    return None


# ---- time -----------------------------------------------------------------------------------

_TIME = re.compile(r"\b(?:what(?:'s| is) the time|what time is it|current time|time is it|today's date|"
                   r"what(?:'s| is) the date|what day is it)\b", re.IGNORECASE)
_ZONE = re.compile(r"\b([A-Z][A-Za-z_]+(?:/[A-Z][A-Za-z_+-]+)+|UTC)\b")


def _time_rule(text: str, history: list[LLMMessage], available: set[str], seed: str) -> BuiltinReply | None:
    if not _TIME.search(text):
        return None
    if CURRENT_TIME not in available:
        return BuiltinReply(text="I can't read a clock from here: I'm the built-in offline model and no "
                                 "time tool is available in this chat.")
    zone = _ZONE.search(text)
    arguments = {"timezone": zone.group(1)} if zone else {}
    where = f" in {zone.group(1)}" if zone else ""
    return BuiltinReply(
        reasoning=f"The user wants the current time{where}. I will check the clock with the current_time tool.",
        tool_calls=(_call(CURRENT_TIME, arguments, seed),),
    )


# ---- search ---------------------------------------------------------------------------------

_SEARCH_PATTERNS = [
    re.compile(r"\bwhat do(?:es)? (?:the )?(?:docs|documentation|documents)(?: say)? (?:say )?about\s+(.+)", re.IGNORECASE),
    re.compile(r"\b(?:search|look up|lookup|find)\s+(?:the\s+)?(?:docs|documentation|documents|knowledge base)"
               r"\s+(?:for|about|on)\s+(.+)", re.IGNORECASE),
    re.compile(r"\b(?:search|look up|lookup)\s+(?:for\s+)?(.+)", re.IGNORECASE),
    re.compile(r"^\s*(?:please\s+|can you\s+|could you\s+)?find\s+(?:me\s+)?(?:info(?:rmation)?\s+(?:on|about)\s+)?(.+)",
               re.IGNORECASE),
]


def _search_query(text: str) -> str | None:
    for pattern in _SEARCH_PATTERNS:
        match = pattern.search(text)
        if match:
            query = match.group(1).strip().strip("?.!\"'").strip()
            query = re.sub(r"^(?:for|about|on)\s+", "", query, flags=re.IGNORECASE)
            if query:
                return query[:200]
    return None


def _search_rule(text: str, history: list[LLMMessage], available: set[str], seed: str) -> BuiltinReply | None:
    query = _search_query(text)
    if query is None:
        return None
    if KNOWLEDGE_SEARCH not in available:
        return BuiltinReply(text=f'I can\'t search the documents for "{query}" in this chat: I\'m the built-in '
                                 "offline model and no search tool is available here.")
    return BuiltinReply(
        reasoning=f'The user is asking about "{query}". I will search the knowledge base and answer from what it '
                  "returns.",
        tool_calls=(_call(KNOWLEDGE_SEARCH, {"query": query}, seed),),
    )


# ---- trips ----------------------------------------------------------------------------------

_TRIP = re.compile(r"\b(?:plan|organi[sz]e|book)\b.*\b(?:trip|vacation|holiday|journey|getaway|itinerary)\b"
                   r"|\bitinerary\b", re.IGNORECASE)
_DESTINATION = re.compile(r"\b(?:to|in|visit(?:ing)?|around)\s+((?:[A-Z][\w'-]+)(?:\s+[A-Z][\w'-]+)*)")
_NUMBER_WORDS = {"one": 1, "a": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                 "eight": 8, "nine": 9, "ten": 10, "a couple of": 2, "a few": 3}
_DAYS = re.compile(r"\b(\d{1,3}|" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True)) + r")[\s-]*days?\b", re.IGNORECASE)
_WEEK = re.compile(r"\b(?:a|one)\s+week\b", re.IGNORECASE)
_FILLER = {"i", "i'd", "id", "we", "we'd", "would", "like", "want", "to", "go", "going", "visit", "the", "a", "an",
           "for", "in", "and", "please", "let's", "lets", "maybe", "about", "trip", "travel", "days", "day",
           "of", "there", "me", "us", "stay", "spend", "with", "on"}


def _trip_days(text: str) -> int | None:
    match = _DAYS.search(text)
    if match:
        raw = match.group(1).lower()
        days = int(raw) if raw.isdigit() else _NUMBER_WORDS[raw]
        return max(1, min(days, MAX_TRIP_DAYS))
    if _WEEK.search(text):
        return 7
    return None


def _trip_destination(text: str, *, loose: bool) -> str | None:
    """The destination in a request ("to Lisbon"); ``loose`` also accepts a bare answer ("lisbon, 3 days")."""
    match = _DESTINATION.search(text)
    if match:
        return match.group(1)
    if not loose:
        return None
    cleaned = _DAYS.sub(" ", _WEEK.sub(" ", text))
    words = [w for w in re.findall(r"[A-Za-zÀ-ÿ][\w'-]*", cleaned) if w.lower() not in _FILLER]
    return _title(" ".join(words[:3])) if words else None


def _trip_plan(destination: str, days: int) -> str:
    activities = [
        "arrive, settle in and walk through the historic centre, then dinner at a local restaurant",
        "visit the main museums and landmarks in the morning, explore the food market in the afternoon",
        "take a day trip to the surroundings and end the day at a viewpoint at sunset",
        "join a guided walking tour of the old neighbourhoods and try the local specialities",
        "relax in a park or on the waterfront, then shop for souvenirs",
        "explore a neighbourhood off the usual tourist path and see a live performance",
        "revisit your favourite spots and pack for the trip home",
    ]
    lines = [f"Here is a {days}-day plan for {destination}:"]
    for day in range(days):
        activity = activities[-1] if day == days - 1 and days > 1 else activities[day % (len(activities) - 1)]
        lines.append(f"Day {day + 1}: {activity}.")
    lines.append("Enjoy your trip!")
    return "\n".join(lines)


def _trip_rule(text: str, history: list[LLMMessage], available: set[str], seed: str) -> BuiltinReply | None:
    previous = next((m for m in reversed(history) if m.role == "assistant"), None)
    if (previous is not None and previous.content.strip() == TRIP_QUESTION
            and _arithmetic_rule(text, history, available, seed) is None):
        # The question was asked in text (no ask_user tool): this message is the answer, unless it is
        # plainly a new request (a user who moved on to arithmetic is not naming a destination).
        return _plan_from_answer(text)
    if not _TRIP.search(text):
        return None
    destination = _trip_destination(text, loose=False)
    if destination:
        return BuiltinReply(text=_trip_plan(destination, _trip_days(text) or DEFAULT_TRIP_DAYS))
    if ASK_USER not in available:
        return BuiltinReply(text=TRIP_QUESTION)
    return BuiltinReply(
        reasoning="The user wants a trip plan but has not said where or for how long. I need to ask before "
                  "I can plan.",
        tool_calls=(_call(ASK_USER, {"question": TRIP_QUESTION}, seed),),
    )


def _plan_from_answer(answer: str) -> BuiltinReply:
    destination = _trip_destination(answer, loose=True)
    if not destination:
        return BuiltinReply(text="I still don't know where you'd like to go. Tell me a destination and I'll "
                                 "plan the trip.")
    return BuiltinReply(text=_trip_plan(destination, _trip_days(answer) or DEFAULT_TRIP_DAYS))


# ---- arithmetic -----------------------------------------------------------------------------

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
_ALLOWED_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Call, ast.Name, ast.Load,
                  ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.UAdd, ast.USub)


def _previous_number(history: Sequence[LLMMessage]) -> str | None:
    for m in reversed(history):
        if m.role == "assistant" and m.content.strip():
            numbers = _NUMBER.findall(_THOUSANDS.sub("", m.content))
            return numbers[-1] if numbers else None
    return None


def _expression(text: str, history: Sequence[LLMMessage]) -> str | None:
    """An arithmetic expression in the message, with "that"/"it" standing for the previous answer."""
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
    """Numbers, operators, parentheses and sqrt only (checked on the syntax tree, nothing evaluated)."""
    try:
        tree = ast.parse(candidate, mode="eval")
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            return False
        if isinstance(node, ast.Name) and node.id != "sqrt":
            return False
        if isinstance(node, ast.Constant) and (isinstance(node.value, bool) or not isinstance(node.value, (int, float))):
            return False
    return True


def _arithmetic_rule(text: str, history: list[LLMMessage], available: set[str], seed: str) -> BuiltinReply | None:
    expression = _expression(text, history)
    if expression is None:
        return None
    if CALCULATOR in available:
        return BuiltinReply(
            reasoning=f"The user wants to compute {expression}. I will use the calculator tool to evaluate it "
                      "exactly.",
            tool_calls=(_call(CALCULATOR, {"expression": expression}, seed),),
        )
    value = _safe_eval(expression)
    if value is None:
        return BuiltinReply(text=f"I can't compute {expression}: it is undefined or too large.")
    return BuiltinReply(text=f"{expression} = {_format_number(value)}.")


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


def _safe_eval(expression: str) -> float | int | None:
    """Evaluate the small expressions this model writes itself; None when invalid or out of bounds."""
    if len(expression) > 200:
        return None
    try:
        tree = ast.parse(expression, mode="eval")
        return _eval_node(tree.body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, TypeError):
        return None


def _eval_node(node: ast.AST) -> float | int:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _eval_node(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval_node(node.left), _eval_node(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 100:
            raise ValueError("exponent too large")
        result = _BINARY[type(node.op)](left, right)
        if isinstance(result, complex) or abs(result) > 1e100:
            raise ValueError("result out of range")
        return result
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "sqrt"
            and len(node.args) == 1 and not node.keywords):
        return math.sqrt(_eval_node(node.args[0]))
    raise ValueError("unsupported expression")


def _format_number(value: Any) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return format(value, ".10g")
    return str(value)


# ---- small talk and fallback ----------------------------------------------------------------

_GREETING = re.compile(r"^\s*(?:hi|hello|hey|good (?:morning|afternoon|evening)|howdy)\b", re.IGNORECASE)
_IDENTITY = re.compile(r"\b(?:who are you|what are you|what can you do|help)\b", re.IGNORECASE)
_THANKS = re.compile(r"^\s*(?:thanks|thank you|cheers)\b", re.IGNORECASE)


def _small_talk_rule(text: str, history: list[LLMMessage], available: set[str], seed: str) -> BuiltinReply | None:
    if _THANKS.search(text):
        return BuiltinReply(text="You're welcome! Anything else I can help with?")
    if _GREETING.search(text):
        name = _known_name(history)
        return BuiltinReply(text=f"Hello{', ' + name if name else ''}! {SELF_DESCRIPTION}")
    if _IDENTITY.search(text):
        return BuiltinReply(text=SELF_DESCRIPTION)
    return None


def _fallback(text: str) -> str:
    topic = " ".join(text.split()[:12]).rstrip("?.!")
    if len(text.split()) > 12:
        topic += "…"
    return (f'You asked: "{topic}". I\'m the built-in offline model, so I can\'t answer that properly. '
            "I can do arithmetic, search the project's documents, tell the time, plan a trip and remember "
            "what you tell me in this conversation.")


# ---- answers from tool results --------------------------------------------------------------


def _parse_result(content: str) -> Any:
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        return content


def _error_text(result: Any) -> str | None:
    if isinstance(result, dict) and result.get("error"):
        return str(result["error"])
    if isinstance(result, dict) and result.get("ok") is False:
        return str(result.get("message") or result.get("detail") or "the tool failed")
    if isinstance(result, str) and result.lower().startswith(("error", "toolerror")):
        return result.split(":", 1)[-1].strip() or result
    return None


def _answer_from_tools(
    messages: Sequence[LLMMessage],
    last_user: int,
    after: list[LLMMessage],
    results: list[LLMMessage],
    available: set[str],
) -> BuiltinReply:
    calls = {c.id: c for m in after if m.role == "assistant" for c in m.tool_calls}
    user_text = messages[last_user].content if last_user >= 0 else ""
    parts = []
    for message in results:
        call = calls.get(message.tool_call_id or "")
        name = call.name if call else (message.name or "tool")
        arguments = call.arguments if call else {}
        parts.append(_answer_for(name, arguments, _parse_result(message.content), user_text))
    return BuiltinReply(text="\n\n".join(parts))


def _answer_for(name: str, arguments: dict[str, Any], result: Any, user_text: str) -> str:
    error = _error_text(result)
    if name == ASK_USER:
        if error is not None:
            return f"I didn't get an answer to my question, so I can't go on with that ({error})."
        # The tool result of ask_user is the user's answer to the question.
        answer = result.get("answer") or result.get("text") if isinstance(result, dict) else result
        answer = str(answer or "")
        question = str(arguments.get("question", ""))
        if question == TRIP_QUESTION or _TRIP.search(user_text):
            return _plan_from_answer(answer).text
        return f"Thanks, noted: {answer}"
    if error is not None:
        what = f" {arguments['expression']}" if name == CALCULATOR and "expression" in arguments else ""
        return f"I couldn't complete that with the {name} tool{what}: {error}"
    if name == CALCULATOR and isinstance(result, (dict, int, float)):
        value = result.get("result") if isinstance(result, dict) else result
        expression = arguments.get("expression", "the expression")
        return f"{expression} = {_format_number(value)}."
    if name == CURRENT_TIME and isinstance(result, dict):
        zone = result.get("timezone", "UTC")
        time_text = str(result.get("time", ""))[:5]
        date_text = result.get("date", "")
        weekday = result.get("weekday", "")
        return f"It is {time_text} ({zone}) on {weekday}, {date_text}.".replace(" , ", " ")
    hits = result.get("results") if isinstance(result, dict) else result
    if name == KNOWLEDGE_SEARCH and isinstance(hits, list):
        query = arguments.get("query", "that")
        if not hits:
            return f'I found nothing in the documents about "{query}".'
        lines = [f'Here is what the documents say about "{query}":']
        for hit in hits[:5]:
            if isinstance(hit, dict):
                snippet = " ".join(str(hit.get("snippet", "")).split())
                lines.append(f"- {hit.get('title', 'Untitled')} ({hit.get('path', '')}): {snippet}")
        return "\n".join(lines)
    # A result this model cannot read (e.g. cut short by the engine): quote it.
    shown = result if isinstance(result, str) else orjson.dumps(result).decode()
    return f"The {name} tool returned: {shown[:500]}"


# ---- summaries ------------------------------------------------------------------------------

_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
_KEY = re.compile(r"\d|\bmy name\b|\b(?:decid|agree|plan|need|want|must|will)\w*|\?")


def _summarize(messages: Sequence[LLMMessage]) -> str:
    """Extractive: keep the sentences with names, numbers, decisions and questions, in order."""
    sentences: list[str] = []
    for m in messages:
        for line in m.content.splitlines():
            line = line.strip()
            speaker = m.role.capitalize()
            role_prefix = re.match(r"^(user|assistant|system)\s*:\s*", line, re.IGNORECASE)
            if role_prefix:
                speaker = role_prefix.group(1).capitalize()
                line = line[role_prefix.end() :]
            for sentence in _SENTENCE.findall(line):
                sentence = sentence.strip()
                if len(sentence) > 2:
                    sentences.append(f"{speaker}: {sentence}")
    if not sentences:
        return "There is no earlier conversation to summarize."
    scored = [(bool(_KEY.search(s)) or bool(re.search(r"\b[A-Z][a-z]+\b", s.split(": ", 1)[1][1:])), i, s)
              for i, s in enumerate(sentences)]
    chosen = [i for keep, i, _ in scored if keep] or [0]
    picked: list[str] = []
    size = 0
    for i in chosen:
        sentence = sentences[i]
        if size + len(sentence) > MAX_SUMMARY_CHARS:
            break
        picked.append(sentence)
        size += len(sentence) + 1
    return " ".join(picked) or sentences[0][:MAX_SUMMARY_CHARS]
