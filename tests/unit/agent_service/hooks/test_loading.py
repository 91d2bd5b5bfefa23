"""Hooks named in AGENT_SERVICE_HOOKS or declared as entry points are loaded; bad names stop the start."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agent_service.hooks.audit import AuditLogHook
from agent_service.hooks.base import Hook
from agent_service.hooks.loading import ENTRY_POINT_GROUP, HookConfigError, load_hooks, resolve
from agent_service.hooks.tool_block import OrgToolBlockHook
from agent_service.settings import AgentServiceSettings


def test_hooks_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(
        "AGENT_SERVICE_HOOKS",
        "agent_service.hooks.audit:AuditLogHook, agent_service.hooks.tool_block:OrgToolBlockHook",
    )
    monkeypatch.setenv("AGENT_SERVICE_AUDIT_LOG", str(tmp_path / "audit" / "hooks.jsonl"))
    monkeypatch.setenv("AGENT_SERVICE_BLOCKED_TOOLS", "acme:calculator")
    hooks = load_hooks(AgentServiceSettings(hook_entry_points=False))
    assert [type(h) for h in hooks] == [AuditLogHook, OrgToolBlockHook]
    assert (tmp_path / "audit").is_dir(), "the audit folder is made at start-up"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("agent_service.hooks.audit", "not of the form module:Class"),
        ("no_such_module_anywhere:Hook", "cannot import no_such_module_anywhere"),
        ("agent_service.hooks.audit:Missing", "has no Missing"),
        ("agent_service.hooks.audit:redact", "not a subclass"),
    ],
)
def test_a_bad_hook_name_is_a_clear_error(spec: str, message: str) -> None:
    with pytest.raises(HookConfigError, match=message):
        resolve(spec)


def test_the_audit_hook_needs_its_file() -> None:
    with pytest.raises(ValueError, match="AGENT_SERVICE_AUDIT_LOG"):
        load_hooks(AgentServiceSettings(hooks=["agent_service.hooks.audit:AuditLogHook"], hook_entry_points=False))


def test_a_malformed_block_entry_is_a_clear_error() -> None:
    settings = AgentServiceSettings(
        hooks=["agent_service.hooks.tool_block:OrgToolBlockHook"], blocked_tools=["calculator"],
        hook_entry_points=False,
    )
    with pytest.raises(ValueError, match="organisation:tool"):
        load_hooks(settings)


class EntryPointHook(Hook):
    pass


def test_hooks_declared_as_entry_points(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A distribution on the path that declares a hook in the group is loaded after the configured ones."""
    dist = tmp_path / "taskforce_test_hooks-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: taskforce-test-hooks\nVersion: 1.0\n")
    module = sys.modules[__name__].__name__
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nexample = {module}:EntryPointHook\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    hooks = load_hooks(AgentServiceSettings(hooks=["agent_service.hooks.tool_block:OrgToolBlockHook"]))
    assert [type(h).__name__ for h in hooks] == ["OrgToolBlockHook", "EntryPointHook"]
    assert load_hooks(AgentServiceSettings(hook_entry_points=False)) == []
