"""The audit log hook: one JSON line per hook call in ``AGENT_SERVICE_AUDIT_LOG``.

Each line says when, at which point, for whom (user, organisation, session, run) and, where the
point has them, the tool (and the MCP server it comes from), its arguments, their digest and how
long the call took. No message or answer text is written (only lengths), and argument values under
a name that looks like a secret are replaced: an audit file is read by more people than the
conversations are. The digest (SHA-256 of the arguments as canonical JSON, before redaction) tells
two calls with the same arguments apart from two that differ, secrets included, without showing them.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from pathlib import Path
from typing import IO, Any

import orjson

from agent_service.hooks.base import (
    AfterModelCall,
    AfterTool,
    AnswerChunk,
    BeforeModelCall,
    BeforeTool,
    Hook,
    HookData,
    HookPoint,
    RunEnd,
    RunStart,
)
from agent_service.settings import AgentServiceSettings
from shared.protocol import utcnow

REDACTED = "[redacted]"
_SECRET_NAME = re.compile(r"pass(word)?|secret|token|api[_-]?key|authori[sz]ation|credential|cookie|private", re.IGNORECASE)


def redact(value: Any) -> Any:
    """``value`` with every entry under a secret-looking key replaced, at any depth."""
    if isinstance(value, dict):
        return {k: REDACTED if _SECRET_NAME.search(str(k)) else redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def digest(arguments: dict[str, Any]) -> str:
    """SHA-256 of ``arguments`` as canonical JSON (sorted keys)."""
    return hashlib.sha256(orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()


def _tool_fields(data: BeforeTool | AfterTool) -> dict[str, Any]:
    fields = {"tool": data.tool, "call_id": data.call_id, "arguments": redact(data.arguments),
              "arguments_sha256": digest(data.arguments)}
    if data.server is not None:
        fields["server"] = data.server
    return fields


class AuditLogHook(Hook):
    def __init__(self, path: Path) -> None:
        # The folder now, so that a path that cannot be written stops the start-up; the file on the
        # first record, so that a start that fails later leaves nothing open.
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[bytes] | None = None
        self._lock = asyncio.Lock()

    @classmethod
    def from_settings(cls, settings: AgentServiceSettings) -> AuditLogHook:
        if settings.audit_log is None:
            raise ValueError("the audit log hook needs AGENT_SERVICE_AUDIT_LOG (the file it appends to)")
        return cls(settings.audit_log)

    async def _write(self, point: HookPoint, data: HookData, **fields: Any) -> None:
        run = data.run
        record = {
            "ts": utcnow().isoformat(), "point": point.value, "user": run.user_id, "org": run.org_id,
            "session_id": run.session_id, "run_id": run.run_id, "profile": run.profile,
        } | fields
        line = orjson.dumps(record, default=str) + b"\n"
        async with self._lock:
            await asyncio.to_thread(self._append, line)

    def _append(self, line: bytes) -> None:
        if self._file is None:
            # Unbuffered appends, one write per record: each line reaches the file whole and in order.
            self._file = self.path.open("ab", buffering=0)
        self._file.write(line)

    async def run_start(self, data: RunStart) -> None:
        await self._write(HookPoint.RUN_START, data, resumed=data.resumed, message_chars=len(data.message))

    async def before_model_call(self, data: BeforeModelCall) -> None:
        await self._write(HookPoint.BEFORE_MODEL_CALL, data, step=data.step, messages=len(data.messages))

    async def after_model_call(self, data: AfterModelCall) -> None:
        await self._write(
            HookPoint.AFTER_MODEL_CALL, data, step=data.step, text_chars=len(data.text),
            tool_calls=[c.name for c in data.tool_calls], duration_ms=_ms(data.duration_s),
        )

    async def before_tool(self, data: BeforeTool) -> None:
        await self._write(HookPoint.BEFORE_TOOL, data, **_tool_fields(data))

    async def after_tool(self, data: AfterTool) -> None:
        await self._write(
            HookPoint.AFTER_TOOL, data, **_tool_fields(data), ok=data.ok, error=data.error,
            duration_ms=_ms(data.duration_s),
        )

    async def answer_chunk(self, data: AnswerChunk) -> None:
        await self._write(HookPoint.ANSWER_CHUNK, data, text_chars=len(data.text))

    async def run_end(self, data: RunEnd) -> None:
        await self._write(
            HookPoint.RUN_END, data, outcome=data.outcome, error_code=data.error_code,
            usage=data.usage.model_dump(), duration_ms=_ms(data.duration_s),
        )

    async def aclose(self) -> None:
        async with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)
