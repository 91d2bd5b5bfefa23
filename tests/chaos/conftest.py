"""What the chaos tests of dependency faults share: a PostgreSQL and a Redis of the test's own (to
restart without disturbing anything else), and a model that streams a long answer."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.dependencies import PrivatePostgres, PrivateRedis
from tests.support.fake_openai import FakeOpenAI, running_fake_openai

# The model's answer: 150 words, one every 50 ms, so a reply streams for about 7.5 s.
WORDS = 150
ANSWER = " ".join(f"token{i}" for i in range(WORDS))


@pytest.fixture
async def postgres() -> AsyncIterator[PrivatePostgres]:
    server = PrivatePostgres()
    await server.start()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
async def redis() -> AsyncIterator[PrivateRedis]:
    server = PrivateRedis()
    await server.start()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
async def long_answers() -> AsyncIterator[dict[str, str]]:
    """The environment that points both services at the fake model streaming ``ANSWER``."""
    fake = FakeOpenAI(tokens=WORDS, token_delay_ms=50, ttft_ms=100)
    async with running_fake_openai(fake) as (_, llm_url):
        yield {"LLM_PROVIDER": "openai", "LLM_BASE_URL": llm_url, "LLM_MODEL": "fake-model"}
