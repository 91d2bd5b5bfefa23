"""Settings, API-key checks, profiles and the error vocabulary."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agent_service.auth import key_is_valid
from agent_service.errors import ProfileNotFound
from agent_service.profiles.schemas import Profile
from agent_service.profiles.service import ProfileStore
from agent_service.settings import PACKAGE_DIR, AgentServiceSettings


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
    assert key_is_valid("b", ["a", "b"])
    assert not key_is_valid("c", ["a", "b"])
    assert not key_is_valid("", ["a"])
    assert not key_is_valid("a", [])


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
