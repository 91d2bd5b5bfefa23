"""The audit log hook writes one JSON line per hook call: who, which tool, its arguments, how long; no secrets."""

from __future__ import annotations

from pathlib import Path

import orjson

from agent_service.hooks.audit import REDACTED, AuditLogHook, redact
from agent_service.hooks.runner import HookRunner
from agent_service.metrics import AgentMetrics
from agent_service.runs.engine import ReActEngine
from agent_service.runs.state import RunContext, RunState
from shared.llm.base import LLMDone, LLMMessage, TextDelta, ToolCall
from shared.protocol import UserContext
from tests.unit.agent_service.runs.test_engine import AddTool, Recorder, ScriptedProvider, Tools, _profile


def test_redact_replaces_secret_looking_values_at_any_depth() -> None:
    args = {"a": 1, "api_key": "sk-1", "nested": {"Password": "p", "list": [{"auth_token": "t", "b": 2}]}}
    assert redact(args) == {"a": 1, "api_key": REDACTED, "nested": {"Password": REDACTED, "list": [{"auth_token": REDACTED, "b": 2}]}}


async def test_one_line_per_hook_call_with_user_org_tool_arguments_and_duration(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    hook = AuditLogHook(path)
    metrics = AgentMetrics()
    provider = ScriptedProvider([
        [ToolCall("c1", "add", {"a": 2, "b": 3, "token": "secret-value"}), LLMDone(5, 1)],
        [TextDelta("5"), LLMDone(9, 1)],
    ])
    engine = ReActEngine(
        provider, Tools(AddTool()), metrics, ask_user_timeout_s=300,
        hooks=HookRunner([hook], timeout_s=2, metrics=metrics),
    )
    ctx = RunContext("s1", "r1", _profile(), UserContext(user_id="alice", org_id="acme"))
    state = RunState(transcript=[LLMMessage(role="user", content="my secret message: add 2 and 3")])
    await engine.run(ctx, state, Recorder())
    await hook.aclose()

    raw = path.read_bytes()
    lines = [orjson.loads(line) for line in raw.splitlines()]
    assert [line["point"] for line in lines] == [
        "run_start", "before_model_call", "after_model_call", "before_tool", "after_tool",
        "before_model_call", "answer_chunk", "after_model_call", "run_end",
    ]
    assert all(line["user"] == "alice" and line["org"] == "acme" and line["session_id"] == "s1" for line in lines)
    after_tool = lines[4]
    assert after_tool["tool"] == "add" and after_tool["ok"] is True
    assert after_tool["arguments"] == {"a": 2, "b": 3, "token": REDACTED}
    assert after_tool["duration_ms"] >= 0 and lines[-1]["outcome"] == "COMPLETE"
    assert b"secret-value" not in raw and b"my secret message" not in raw
