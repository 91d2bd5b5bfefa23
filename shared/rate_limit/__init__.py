"""Sliding-window rate limits on model calls, per organisation and model.

Here in ``shared`` because both services make model calls under the same limits: the Agent Service
before each call of a run, the ConversationService on its direct path. With one Redis both draw on
one budget, whichever replica or service makes the call. ``config`` says what the limits are,
``window`` keeps the counts in-process, ``redis_window`` in Redis, ``limiter`` waits for room.
"""

from shared.llm.base import LLMProvider
from shared.llm.config import LLMSettings
from shared.rate_limit.config import Dimension, Limits, RateLimitConfig, RateLimitSettings
from shared.rate_limit.limiter import RateLimited, RateLimiter, Wait
from shared.rate_limit.window import MemoryWindow


def default_model(llm: LLMSettings, provider: LLMProvider) -> str:
    """The model a call without one is served by, named alike in both services: the budget it draws on."""
    return llm.llm_model if llm.llm_provider == "openai" else provider.name


def build_limiter(settings: RateLimitSettings, redis_url: str | None) -> RateLimiter | None:
    """The limiter the settings ask for; None when nothing is limited anywhere."""
    config = RateLimitConfig.from_settings(settings)
    if config.unlimited:
        return None
    if redis_url:
        from shared.rate_limit.redis_window import RedisWindow  # the Redis client only when there is a Redis

        return RateLimiter(config, RedisWindow(redis_url, settings.redis_prefix), max_wait_s=settings.max_wait_s)
    return RateLimiter(config, MemoryWindow(), max_wait_s=settings.max_wait_s)


__all__ = [
    "Dimension", "Limits", "MemoryWindow", "RateLimitConfig", "RateLimitSettings", "RateLimited", "RateLimiter",
    "Wait", "build_limiter", "default_model",
]
