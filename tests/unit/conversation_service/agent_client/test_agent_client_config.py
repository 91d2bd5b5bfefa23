from __future__ import annotations

import pytest

from conversation_service.agent_client import AgentClientConfig


def test_defaults_are_the_spec_numbers() -> None:
    config = AgentClientConfig()
    assert config.retry_delays == (1.0, 2.0, 4.0)
    assert config.max_attempts == 4
    assert config.server_error_retries == 1
    assert config.request_timeout == 60.0
    assert config.stream_timeout == 300.0
    # Heartbeats come every 15 s; the idle timeout must outlast two of them.
    assert config.read_timeout > 2 * 15
    assert config.max_event_bytes == 1024 * 1024


@pytest.mark.parametrize(
    "kwargs",
    [
        {"read_timeout": 0},
        {"request_timeout": -1},
        {"stream_timeout": 0},
        {"retry_delays": [1, 2]},
        {"retry_delays": (1, -2)},
        {"reconnect_delays": tuple(range(25))},
        {"server_error_retries": -1},
        {"max_event_bytes": 10},
        {"max_connections": 0},
        {"max_connections": 5, "max_keepalive_connections": 6},
    ],
)
def test_invalid_knobs_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        AgentClientConfig(**kwargs)


def test_no_stream_limit_is_allowed() -> None:
    assert AgentClientConfig(stream_timeout=None).stream_timeout is None
