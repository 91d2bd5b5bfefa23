"""Which LLM provider a service talks to, read from unprefixed ``LLM_*`` environment variables.

Both services read the same variables, so one ``LLM_PROVIDER=openai LLM_BASE_URL=...`` points the
whole product at a real model; the default is the built-in offline model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import httpx
from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.fastpath.aiohttp_transport import AiohttpTransport
from shared.llm.base import LLMProvider
from shared.llm.builtin import BuiltinProvider
from shared.llm.capacity import ConnectionSlots
from shared.llm.openai import OpenAICompatibleProvider

__all__ = ["LLMSettings", "build_provider"]


class LLMSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore", case_sensitive=False)

    llm_provider: Literal["builtin", "openai"] = "builtin"
    # The OpenAI-compatible API root, including the version segment: http://127.0.0.1:8000/v1.
    llm_base_url: str = "https://api.openai.com/v1"
    llm_api_key: SecretStr | None = None
    llm_model: str = "gpt-4o-mini"
    llm_connect_timeout: float = Field(default=5.0, gt=0, le=120)
    # Longest silence tolerated between two streamed bytes; reasoning models can think for a while.
    llm_read_timeout: float = Field(default=60.0, gt=0, le=900)
    # Model calls of one process streaming at once; at the limit a call waits its turn.
    llm_max_connections: int = Field(default=100, ge=1, le=10_000)
    # Longest a model call waits for its turn at the connection limit before it fails.
    llm_request_timeout: float = Field(default=60.0, gt=0, le=900)
    # Pace of the built-in model: like a fast hosted model by default, 0 in tests.
    llm_builtin_first_token_ms: int = Field(default=150, ge=0, le=60_000)
    llm_builtin_chunk_delay_ms: int = Field(default=15, ge=0, le=10_000)

    @model_validator(mode="after")
    def _check_base_url(self) -> LLMSettings:
        if self.llm_provider == "openai" and not self.llm_base_url.startswith(("http://", "https://")):
            raise ValueError("LLM_BASE_URL must be an http(s) URL such as http://127.0.0.1:8000/v1")
        return self


def build_provider(
    settings: LLMSettings, http_client: httpx.AsyncClient | None = None, *,
    on_wait: Callable[[float], None] | None = None, on_waiters: Callable[[int], None] | None = None,
    wrap_transport: Callable[[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport] | None = None,
    read_window_s: float = 0.0,
) -> LLMProvider:
    """The configured provider (close it with ``aclose``). ``http_client``: a pooled client for the
    LLM upstream with room for ``llm_max_connections`` calls; without one the OpenAI-compatible
    provider creates (and closes) its own, on ``AiohttpTransport`` wrapped by ``wrap_transport`` when
    given (tracing), which reads a fast stream at most once per ``read_window_s``
    (``shared.fastpath.coalesce.read_window_s``). ``on_wait``/``on_waiters`` report calls waiting for a
    free connection."""
    if settings.llm_provider == "openai":
        transport = None
        if http_client is None:
            transport = AiohttpTransport(max_connections=settings.llm_max_connections, read_window_s=read_window_s)
            if wrap_transport is not None:
                transport = wrap_transport(transport)
        return OpenAICompatibleProvider(
            base_url=settings.llm_base_url,
            api_key=settings.llm_api_key,
            model=settings.llm_model,
            http_client=http_client,
            transport=transport,
            connect_timeout=settings.llm_connect_timeout,
            read_timeout=settings.llm_read_timeout,
            request_timeout=settings.llm_request_timeout,
            slots=ConnectionSlots(settings.llm_max_connections, on_wait=on_wait, on_waiters=on_waiters),
        )
    return BuiltinProvider(
        first_token_delay=settings.llm_builtin_first_token_ms / 1000,
        chunk_delay=settings.llm_builtin_chunk_delay_ms / 1000,
    )
