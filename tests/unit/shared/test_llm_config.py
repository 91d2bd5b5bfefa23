"""LLM settings from the environment and the provider factory."""

from __future__ import annotations

import httpx
import pytest
from pydantic import ValidationError

from shared.llm.builtin import BuiltinProvider
from shared.llm.config import LLMSettings, build_provider
from shared.llm.openai import OpenAICompatibleProvider


def test_defaults_give_the_builtin_model(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LLM_PROVIDER", "LLM_BUILTIN_FIRST_TOKEN_MS", "LLM_BUILTIN_CHUNK_DELAY_MS"):
        monkeypatch.delenv(name, raising=False)
    settings = LLMSettings()
    provider = build_provider(settings)
    assert isinstance(provider, BuiltinProvider)
    assert provider.first_token_delay == pytest.approx(0.15)
    assert provider.chunk_delay == pytest.approx(0.015)


def test_environment_selects_the_openai_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_PROVIDER", "openai")
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:8000/v1")
    monkeypatch.setenv("LLM_API_KEY", "sk-very-secret")
    monkeypatch.setenv("LLM_MODEL", "qwen2.5")
    monkeypatch.setenv("LLM_READ_TIMEOUT", "12.5")
    settings = LLMSettings()
    assert settings.llm_read_timeout == 12.5
    assert "sk-very-secret" not in repr(settings) and "sk-very-secret" not in str(settings.model_dump())
    provider = build_provider(settings)
    assert isinstance(provider, OpenAICompatibleProvider)
    assert "sk-very-secret" not in repr(provider)


async def test_the_injected_client_is_used_and_not_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_PROVIDER", "openai")
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:8000/v1")
    async with httpx.AsyncClient() as client:
        provider = build_provider(LLMSettings(), http_client=client)
        await provider.aclose()
        assert not client.is_closed


def test_bad_values_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_PROVIDER", "magic")
    with pytest.raises(ValidationError):
        LLMSettings()
    monkeypatch.setenv("LLM_PROVIDER", "openai")
    monkeypatch.setenv("LLM_BASE_URL", "ftp://example")
    with pytest.raises(ValidationError):
        LLMSettings()
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:8000/v1")
    monkeypatch.setenv("LLM_BUILTIN_CHUNK_DELAY_MS", "-1")
    with pytest.raises(ValidationError):
        LLMSettings()


def test_public_names_exist() -> None:
    import shared.llm.builtin
    import shared.llm.config
    import shared.llm.openai

    for module in (shared.llm.builtin, shared.llm.config, shared.llm.openai):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"
