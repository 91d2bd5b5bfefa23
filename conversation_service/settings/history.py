"""Windowing parameters of the HistoryExtractor, every one from the environment (``HISTORY_*``)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.protocol import MAX_HISTORY_MESSAGES
from shared.tokens import DEFAULT_ENCODING


class HistoryStrategyName(StrEnum):
    LAST_N = "last_n"  # the newest HISTORY_MAX_MESSAGES messages
    TOKEN_BUDGET = "token_budget"  # as many of the newest messages as fit HISTORY_TOKEN_BUDGET
    SUMMARY = "summary"  # a verbatim window plus one summary of everything older


class HistorySettings(BaseSettings):
    """The token budget is a ceiling for every strategy: whatever the window, the history handed to
    the agent never exceeds it, so a handful of huge messages cannot overflow the agent's context."""

    model_config = SettingsConfigDict(env_prefix="HISTORY_", extra="ignore")

    strategy: HistoryStrategyName = HistoryStrategyName.LAST_N
    max_messages: int = Field(10, ge=1, le=MAX_HISTORY_MESSAGES)
    token_budget: int = Field(4000, ge=64, le=1_000_000)
    encoding: str = DEFAULT_ENCODING
    # Share of the budget above which the result says the context is nearly full (spec Risk 4: 80 %).
    warn_ratio: float = Field(0.8, gt=0.0, le=1.0)

    # Summary compression: starts when the conversation holds more than ``summary_trigger``
    # messages; the newest ``summary_window`` stay verbatim, everything older becomes one summary.
    summary_trigger: int = Field(20, ge=1, le=100_000)
    summary_window: int = Field(10, ge=1, le=MAX_HISTORY_MESSAGES)
    # How many messages may pile up verbatim beyond the window before the cached summary is
    # refreshed; 0 refreshes it every time the window moves. A larger step saves LLM calls.
    summary_refresh_step: int = Field(0, ge=0, le=MAX_HISTORY_MESSAGES)
    # Ceiling of the summary itself; it is part of the token budget.
    summary_max_tokens: int = Field(512, ge=16, le=100_000)
    # Transcript tokens sent per summarisation call; longer backlogs are folded chunk by chunk.
    summary_chunk_tokens: int = Field(6000, ge=256, le=1_000_000)
    # LLM calls one extraction may make; a backlog needing more is summarised from its newest end
    # and the oldest messages are left out (counted in the stats).
    summary_max_calls: int = Field(4, ge=1, le=100)
    summary_timeout_seconds: float = Field(30.0, gt=0, le=600)
    summary_model: str | None = None

    # Messages looked at per extraction: a longer conversation contributes its newest ones (the
    # rest count as dropped), so one huge conversation cannot make a turn arbitrarily slow.
    max_input_messages: int = Field(10_000, ge=1, le=1_000_000)
    # Counting tokens of this many uncached characters or more runs in a worker thread, so a long
    # history never blocks the event loop (1,000 messages take ~20 ms to tokenize); 0 never does.
    offload_chars: int = Field(16_000, ge=0)
    # Messages whose token counts are remembered (least recently used go first), about 280 bytes
    # each: 10,000 is ~2.7 MiB, the windows of 1,000 conversations at the default 10 messages.
    # Conversations that are left behind keep their entries until newer ones push them out, so the
    # cache fills with the traffic; a larger size keeps the process growing for that much longer.
    token_cache_size: int = Field(10_000, ge=0, le=10_000_000)

    @model_validator(mode="after")
    def _summary_fits_budget(self) -> HistorySettings:
        if self.strategy is HistoryStrategyName.SUMMARY and self.summary_max_tokens >= self.token_budget:
            raise ValueError("HISTORY_SUMMARY_MAX_TOKENS must be smaller than HISTORY_TOKEN_BUDGET")
        return self
