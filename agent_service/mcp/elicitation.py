"""A server's question to the user (an elicitation) as the chat asks it, and the user's answer as
the server takes it.

The chat asks in words and takes a line of text, so a question says what the server wants field
by field, and an answer is read back into the form the server gave: one field takes the whole
answer; several take a JSON object or one ``field: value`` line each. A field left out takes its
default. The answer ``decline`` (or ``approved: false`` on the API) declines. An answer that does
not fit is not sent: the user is asked again, with what was wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import orjson
from pydantic import TypeAdapter

from agent_service.tools.base import UserReply

_PARAMS: TypeAdapter[types.ElicitRequestParams] = TypeAdapter(types.ElicitRequestParams)
_TRUE = frozenset({"yes", "y", "true", "1", "on", "ok", "agree", "accept"})
_FALSE = frozenset({"no", "n", "false", "0", "off", "disagree"})
DECLINE = "decline"
MAX_FIELDS = 32


class AnswerDoesNotFit(ValueError):
    """What is wrong with an answer, in words for the user."""


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    schema: dict[str, Any]
    required: bool

    @property
    def title(self) -> str:
        return str(self.schema.get("title") or self.name)

    def describe(self) -> str:
        text = f"{self.name} ({_kind(self.schema)}{', required' if self.required else ''})"
        if self.schema.get("description"):
            text += f": {self.schema['description']}"
        if "default" in self.schema:
            text += f" [default: {self.schema['default']}]"
        return text


def params_of(data: dict[str, Any]) -> types.ElicitRequestParams:
    return _PARAMS.validate_python(data)


def dump(params: types.ElicitRequestParams) -> dict[str, Any]:
    return params.model_dump(mode="json", by_alias=True, exclude_none=True)


def fields(params: types.ElicitRequestFormParams) -> list[Field]:
    schema = params.requested_schema or {}
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    return [Field(name, prop if isinstance(prop, dict) else {}, name in required)
            for name, prop in list(properties.items())[:MAX_FIELDS]]


def question(server: str, tool: str, params: types.ElicitRequestParams, problem: str | None = None) -> str:
    """The question the user reads: who asks, the server's message, how to answer."""
    lines = [f"That answer did not fit: {problem}", ""] if problem else []
    lines.append(f"{tool} (MCP server {server}) asks: {params.message.strip()}")
    if isinstance(params, types.ElicitRequestURLParams):
        lines.append(f"Open {params.url} and complete it there, then answer \"done\" (or \"{DECLINE}\").")
        return "\n".join(lines)
    form = fields(params)
    if len(form) == 1:
        lines.append(f"Answer with the {form[0].describe()}.")
    elif form:
        lines.append("Answer with one line per field, as name: value (or a JSON object):")
        lines += [f"- {field.describe()}" for field in form]
    lines.append(f"Answer \"{DECLINE}\" to refuse.")
    return "\n".join(lines)


def answer(params: types.ElicitRequestParams, reply: UserReply) -> types.ElicitResult:
    """The server's answer to ``params``; ``AnswerDoesNotFit`` when the reply cannot be one."""
    text = reply.text.strip()
    if reply.declined or text.lower() == DECLINE:
        return types.ElicitResult(action="decline")
    if isinstance(params, types.ElicitRequestURLParams):
        return types.ElicitResult(action="accept")
    form = fields(params)
    if not form:
        return types.ElicitResult(action="accept", content={})
    given = {form[0].name: text} if len(form) == 1 else _named_values(text, form)
    content: dict[str, Any] = {}
    missing = []
    for field in form:
        if field.name in given:
            content[field.name] = _value(field, given[field.name])
        elif "default" in field.schema:
            content[field.name] = field.schema["default"]
        elif field.required:
            missing.append(field.name)
    if missing:
        raise AnswerDoesNotFit(f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} required")
    return types.ElicitResult(action="accept", content=content)


def _named_values(text: str, form: list[Field]) -> dict[str, Any]:
    by_name = {f.name.lower(): f.name for f in form} | {f.title.lower(): f.name for f in form}
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        pairs = [(str(k), v) for k, v in parsed.items()]
    else:
        pairs = []
        for line in text.splitlines():
            if line.strip():
                key, sep, value = line.partition(":")
                if not sep:
                    raise AnswerDoesNotFit(f"write one line per field as name: value (not {line.strip()!r})")
                pairs.append((key.strip().lstrip("-").strip(), value.strip()))
    values: dict[str, Any] = {}
    for key, value in pairs:
        name = by_name.get(key.lower())
        if name is None:
            raise AnswerDoesNotFit(f"there is no field {key!r} (fields: {', '.join(f.name for f in form)})")
        values[name] = value
    return values


def _value(field: Field, raw: Any) -> Any:
    """``raw`` as the field's type; ``AnswerDoesNotFit`` when it is not one."""
    schema = field.schema
    kind = schema.get("type")
    if kind == "array":
        items = raw if isinstance(raw, list) else [part.strip() for part in str(raw).split(",") if part.strip()]
        allowed = _choices(schema.get("items") or {})
        return [_choice(field, str(item), allowed) for item in items] if allowed else [str(i) for i in items]
    allowed = _choices(schema)
    if allowed:
        return _choice(field, str(raw), allowed)
    if kind == "boolean":
        if isinstance(raw, bool):
            return raw
        word = str(raw).strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise AnswerDoesNotFit(f"{field.name} is yes or no")
    if kind in ("integer", "number"):
        return _number(field, raw, kind)
    return _text(field, raw)


def _number(field: Field, raw: Any, kind: str) -> int | float:
    try:
        value: int | float = int(str(raw).strip()) if kind == "integer" else float(str(raw).strip())
    except ValueError:
        raise AnswerDoesNotFit(f"{field.name} is {'a whole number' if kind == 'integer' else 'a number'}") from None
    low, high = field.schema.get("minimum"), field.schema.get("maximum")
    if (isinstance(low, int | float) and value < low) or (isinstance(high, int | float) and value > high):
        raise AnswerDoesNotFit(f"{field.name} is between {low} and {high}")
    return value


def _text(field: Field, raw: Any) -> str:
    value = str(raw)
    short, long = field.schema.get("minLength"), field.schema.get("maxLength")
    if (isinstance(short, int) and len(value) < short) or (isinstance(long, int) and len(value) > long):
        raise AnswerDoesNotFit(f"{field.name} has {short or 0} to {long or 'any number of'} characters")
    if field.schema.get("format") == "email" and not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", value):
        raise AnswerDoesNotFit(f"{field.name} is an email address")
    return value


def _choices(schema: dict[str, Any]) -> dict[str, str]:
    """An enum's values by what the user may write (the value or its title, any case)."""
    found: dict[str, str] = {}
    for value in schema.get("enum") or ():
        found[str(value).lower()] = str(value)
    for option in [*(schema.get("oneOf") or ()), *(schema.get("anyOf") or ())]:
        if isinstance(option, dict) and "const" in option:
            found[str(option["const"]).lower()] = str(option["const"])
            if option.get("title"):
                found[str(option["title"]).lower()] = str(option["const"])
    return found


def _choice(field: Field, raw: str, allowed: dict[str, str]) -> str:
    value = allowed.get(raw.strip().lower())
    if value is None:
        raise AnswerDoesNotFit(f"{field.name} is one of {', '.join(sorted(set(allowed.values())))}")
    return value


def _kind(schema: dict[str, Any]) -> str:
    if _choices(schema):
        return "one of " + _shown(schema)
    if schema.get("type") == "array":
        items = schema.get("items") or {}
        return f"any of {_shown(items)}, comma-separated" if _choices(items) else "a list, comma-separated"
    return {"boolean": "yes or no", "integer": "a whole number", "number": "a number"}.get(
        str(schema.get("type")), "text")


def _shown(schema: dict[str, Any]) -> str:
    """An enum's options as the user reads them: their titles where they have them."""
    options = [str(value) for value in schema.get("enum") or ()]
    for option in [*(schema.get("oneOf") or ()), *(schema.get("anyOf") or ())]:
        if isinstance(option, dict) and "const" in option:
            options.append(str(option.get("title") or option["const"]))
    return ", ".join(sorted(set(options)))
