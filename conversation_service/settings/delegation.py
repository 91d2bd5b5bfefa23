"""Knobs of agent delegation, read from the environment (unprefixed names, like the rest of the
ConversationService). Defaults are the spec's numbers (Stories 6 and 7)."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from conversation_service.agent_client import AgentClientConfig


class DelegationSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore", case_sensitive=False)

    agent_profile_name: str = "default"
    # Story 7 timeouts: 60 s until an execution streams its first event, 5 minutes per stream.
    agent_request_timeout_s: float = Field(default=60.0, gt=0, le=600)
    agent_stream_timeout_s: float = Field(default=300.0, gt=0, le=3600)
    # Idle time between two reads of the SSE stream; > 2 x the Agent Service's 15 s heartbeat.
    agent_read_timeout_s: float = Field(default=45.0, gt=0, le=600)
    agent_connect_timeout_s: float = Field(default=5.0, gt=0, le=60)
    # Backoff before each retry of an execution that has not started streaming (3 retries).
    agent_retry_delays_s: str = "1,2,4"
    agent_reconnect_delays_s: str = "1,2,4"
    # A stream that broke mid-run is resumed, the last delay repeating, for this long before the
    # reply is given up: a short partition or an Agent Service restart loses nothing.
    agent_resume_budget_s: float = Field(default=30.0, ge=0, le=3600)
    # Circuit breaker: this many failures inside the window open it; open this long before one probe.
    agent_breaker_failures: int = Field(default=5, ge=1, le=1000)
    agent_breaker_window_s: float = Field(default=60.0, gt=0)
    agent_breaker_open_s: float = Field(default=30.0, gt=0)
    # Agent events buffered between the SSE reader and the processor (back-pressure beyond it).
    agent_event_queue_size: int = Field(default=256, ge=1, le=100_000)
    # How long /health trusts its last look at the Agent Service's /health.
    agent_health_cache_s: float = Field(default=5.0, ge=0, le=300)
    # Spec Story 6 / Risk 3: an unanswered ASK_USER expires after 5 minutes.
    ask_user_timeout_s: float = Field(default=300.0, gt=0, le=7 * 24 * 3600)
    # A normal chat message sent while a question is pending is taken as its answer.
    ask_user_chat_message_is_answer: bool = True
    # Cleanup job: how often it looks for expired questions and stale sessions, and batch size.
    agent_cleanup_interval_s: float = Field(default=15.0, gt=0, le=3600)
    agent_cleanup_batch: int = Field(default=100, ge=1, le=10_000)

    @field_validator("agent_retry_delays_s", "agent_reconnect_delays_s")
    @classmethod
    def _delays(cls, value: str) -> str:
        cls.parse_delays(value)
        return value

    @staticmethod
    def parse_delays(value: str) -> tuple[float, ...]:
        try:
            delays = tuple(float(part) for part in value.split(",") if part.strip())
        except ValueError as exc:
            raise ValueError("delays must be comma-separated seconds, e.g. 1,2,4") from exc
        if any(d < 0 for d in delays) or len(delays) > 20:
            raise ValueError("delays must be at most 20 values >= 0")
        return delays

    def client_config(self) -> AgentClientConfig:
        return AgentClientConfig(
            connect_timeout=self.agent_connect_timeout_s,
            read_timeout=self.agent_read_timeout_s,
            request_timeout=self.agent_request_timeout_s,
            stream_timeout=self.agent_stream_timeout_s,
            retry_delays=self.parse_delays(self.agent_retry_delays_s),
            reconnect_delays=self.parse_delays(self.agent_reconnect_delays_s),
            resume_budget=self.agent_resume_budget_s,
        )
