"""Which tools of a server a model can be offered, by what name, and their defaults from annotations."""

from __future__ import annotations

import mcp_types as types

from agent_service.mcp.tools import model_name, needs_approval, schema_problem

OBJECT = {"type": "object", "properties": {"q": {"type": "string"}}}


def test_names_take_the_prefix_and_lose_what_providers_refuse() -> None:
    assert model_name("files_", "read_file") == "files_read_file"
    assert model_name("gh_", "repos.list/all") == "gh_repos_list_all"
    assert model_name("", "x" * 64) == "x" * 64
    assert model_name("files_", "x" * 60) is None


def test_schemas_a_provider_cannot_take_are_found() -> None:
    assert schema_problem(OBJECT, 32 * 1024) is None
    assert "not a JSON Schema of an object" in schema_problem({"type": "string"}, 32 * 1024)
    assert "not a JSON Schema of an object" in schema_problem(["no"], 32 * 1024)
    huge = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "d" * 100} for i in range(50)}}
    assert "bytes (at most 1024)" in schema_problem(huge, 1024)
    deep: dict = {"type": "string"}
    for _ in range(40):
        deep = {"type": "object", "properties": {"n": deep}}
    assert "nests deeper" in schema_problem(deep, 1024 * 1024)
    remote = {"type": "object", "properties": {"a": {"$ref": "https://evil.example/s.json"}}}
    assert "refers to other documents" in schema_problem(remote, 32 * 1024)
    local = {"type": "object", "$defs": {"a": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/a"}}}
    assert schema_problem(local, 32 * 1024) is None
    assert "not a valid JSON Schema" in schema_problem({"type": "object", "properties": {"a": {"type": 12}}}, 32 * 1024)


def test_a_tool_that_may_change_something_asks_by_default() -> None:
    assert needs_approval(None) is True
    assert needs_approval(types.ToolAnnotations()) is True
    assert needs_approval(types.ToolAnnotations(readOnlyHint=True)) is False
    assert needs_approval(types.ToolAnnotations(readOnlyHint=False, destructiveHint=False)) is True
    assert needs_approval(types.ToolAnnotations(readOnlyHint=True, destructiveHint=True)) is True
