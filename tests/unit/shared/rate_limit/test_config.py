"""Limits: defaults from the environment, per-organisation and per-model overrides from a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.rate_limit.config import Limits, RateLimitConfig, RateLimitConfigError, RateLimitSettings


def test_defaults_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_SERVICE_RATE_LIMIT_REQUESTS", "30")
    monkeypatch.setenv("AGENT_SERVICE_RATE_LIMIT_OUTPUT_TOKENS", "5000")
    monkeypatch.setenv("AGENT_SERVICE_RATE_LIMIT_WINDOW_S", "10")
    config = RateLimitConfig.from_settings(RateLimitSettings())
    assert config.limits_for("any", "m") == Limits(requests=30, output_tokens=5000, window_s=10)
    assert not config.unlimited
    assert RateLimitConfig.from_settings(RateLimitSettings(requests=0, output_tokens=0)).unlimited


def test_overrides_per_organisation_and_model(tmp_path: Path) -> None:
    path = tmp_path / "limits.yaml"
    path.write_text("acme:\n  requests: 2\n  models:\n    big: {requests: 1, window_s: 5}\nfree: {input_tokens: 100}\n")
    config = RateLimitConfig.from_settings(RateLimitSettings(overrides_file=path))
    assert not config.unlimited, "an override alone is a limit"
    assert config.limits_for("acme", "small") == Limits(requests=2)
    assert config.limits_for("acme", "big") == Limits(requests=1, window_s=5)
    assert config.limits_for("free", "small") == Limits(input_tokens=100)
    assert config.limits_for("other", "small").unlimited
    assert config.limits_for(None, "small").unlimited


@pytest.mark.parametrize(
    "content", ["- acme\n", "acme: {requests: -1}\n", "acme: {request: 2}\n", "acme: [unclosed\n"],
)
def test_a_bad_overrides_file_is_a_clear_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "limits.yaml"
    path.write_text(content)
    with pytest.raises(RateLimitConfigError, match="rate limit overrides"):
        RateLimitConfig.from_settings(RateLimitSettings(overrides_file=path))


def test_a_missing_overrides_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RateLimitConfigError, match="missing.yaml"):
        RateLimitConfig.from_settings(RateLimitSettings(overrides_file=tmp_path / "missing.yaml"))
