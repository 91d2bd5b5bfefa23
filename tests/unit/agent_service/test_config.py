"""Settings, API-key checks, profiles and the error vocabulary."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from pydantic import ValidationError

from agent_service.access.caller import Permission
from agent_service.access.resolver import LEGACY_CALLER, CallerResolver
from agent_service.errors import ProfileNotFound
from agent_service.profiles.schemas import Profile
from agent_service.profiles.service import ProfileStore
from agent_service.settings import PACKAGE_DIR, AgentServiceSettings, CallerKeySettings


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_SERVICE_API_KEYS", " k1, k2 ,,")
    monkeypatch.setenv("AGENT_SERVICE_HEARTBEAT_SECONDS", "2.5")
    monkeypatch.setenv("AGENT_SERVICE_DATABASE_URL", "postgresql+asyncpg://u@h/db")
    settings = AgentServiceSettings()
    assert settings.api_keys == ["k1", "k2"]
    assert settings.heartbeat_seconds == 2.5
    assert settings.should_migrate_on_start is False  # PostgreSQL is migrated explicitly


def test_sqlite_default_migrates_on_start(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AGENT_SERVICE_DATABASE_URL", "AGENT_SERVICE_MIGRATE_ON_START"):
        monkeypatch.delenv(name, raising=False)
    settings = AgentServiceSettings()
    assert settings.database_url.startswith("sqlite+aiosqlite:///")
    assert settings.should_migrate_on_start is True
    assert settings.heartbeat_seconds == 15 and settings.ask_user_timeout_seconds == 300


def test_key_check() -> None:
    named = CallerKeySettings(name="partner", key_sha256=hashlib.sha256(b"p-key").hexdigest(), kind="agent",
                              orgs=["acme"], permissions=["a2a"])
    resolver = CallerResolver(AgentServiceSettings(api_keys=["a", "b"], callers=[named]), None)
    assert resolver.by_key("b") == LEGACY_CALLER and LEGACY_CALLER.full_trust
    partner = resolver.by_key("p-key")
    assert partner is not None and partner.principal == "agent:partner" and partner.orgs == {"acme"}
    assert partner.permissions == {Permission.A2A} and not partner.full_trust
    assert resolver.by_key("c") is None
    assert resolver.by_key("") is None
    assert CallerResolver(AgentServiceSettings(), None).by_key("a") is None


def test_callers_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    digest = hashlib.sha256(b"k").hexdigest()
    monkeypatch.setenv("AGENT_SERVICE_CALLERS", f'[{{"name": "chat", "key_sha256": "{digest}", "orgs": ["acme"]}}]')
    monkeypatch.setenv("AGENT_SERVICE_AUTH_SERVICE_CLIENTS", "chat-backend, reports")
    settings = AgentServiceSettings()
    assert settings.callers[0].kind == "service" and settings.callers[0].permissions == ["runs", "a2a", "memory", "mcp"]
    assert settings.auth_service_clients == ["chat-backend", "reports"]
    for wrong in ('[{"name": "x", "key_sha256": "abc"}]', f'[{{"name": "x", "key_sha256": "{digest}", "orgs": ["*", "a"]}}]',
                  f'[{{"name": "x", "key_sha256": "{digest}", "permissions": ["root"]}}]'):
        monkeypatch.setenv("AGENT_SERVICE_CALLERS", wrong)
        with pytest.raises(ValidationError):
            AgentServiceSettings()


def test_default_profiles_file() -> None:
    store = ProfileStore.from_file(PACKAGE_DIR / "profiles.yaml")
    default = store.get("default")
    assert set(default.tools) == {
        "calculator", "knowledge_search", "current_time", "ask_user", "create_file", "share_link", "emit_data",
    }
    assert store.get("careful").approval_required_tools == ["calculator"]
    with pytest.raises(ProfileNotFound):
        store.get("missing")
    store.check_tools(lambda name: name in {
        "calculator", "knowledge_search", "current_time", "ask_user", "create_file", "share_link", "emit_data",
    })
    with pytest.raises(ValueError, match="unknown tools"):
        store.check_tools(lambda name: name != "knowledge_search")


def test_profile_validation(tmp_path: Path) -> None:
    with pytest.raises(ValidationError):
        Profile(name="p", system_prompt="s", tools=["a"], approval_required_tools=["b"])
    with pytest.raises(ValidationError):
        Profile(name="p", system_prompt="s", max_steps=0)
    dup = tmp_path / "p.yaml"
    dup.write_text("profiles:\n  - {name: a, system_prompt: x}\n  - {name: a, system_prompt: y}\n")
    with pytest.raises(ValueError, match="twice"):
        ProfileStore.from_file(dup)
