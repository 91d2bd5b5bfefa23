"""The LLM connection limit: at the limit a model call waits its turn (bounded by the request
timeout) instead of failing, and calls that time out or are cancelled give their connection back.

Against the fake OpenAI-compatible server, a real HTTP server on loopback.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from shared.llm.base import LLMDone, LLMMessage, LLMTimeoutError, TextDelta
from shared.llm.capacity import ConnectionSlots
from shared.llm.config import LLMSettings, build_provider
from shared.llm.openai import OpenAICompatibleProvider
from tests.support.fake_openai import FakeOpenAI, TextReply, running_fake_openai

MESSAGES = [LLMMessage(role="user", content="hi")]
LIMIT = 5


class Waits:
    """What the provider reports to the service's metrics."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.waiters: list[int] = []


def provider_for(base_url: str, waits: Waits, **kwargs) -> OpenAICompatibleProvider:
    slots = ConnectionSlots(LIMIT, on_wait=waits.seconds.append, on_waiters=waits.waiters.append)
    kwargs.setdefault("read_timeout", 5.0)
    kwargs.setdefault("request_timeout", 30.0)
    return OpenAICompatibleProvider(base_url=base_url, model="m", slots=slots, **kwargs)


async def collect(provider: OpenAICompatibleProvider) -> list:
    return [event async for event in provider.stream(MESSAGES)]


async def test_a_pool_exhausted_by_timed_out_and_cancelled_streams_serves_the_next_100_runs() -> None:
    async with running_fake_openai() as (fake, base_url):
        waits = Waits()
        provider = provider_for(base_url, waits, read_timeout=0.3)
        try:
            # Twice the limit of calls whose model never answers in time: half wait their turn, then
            # every one times out reading.
            fake.enqueue(*[TextReply(text="too late", ttft_ms=1500) for _ in range(2 * LIMIT)])
            outcomes = await asyncio.gather(*(collect(provider) for _ in range(2 * LIMIT)), return_exceptions=True)
            assert all(isinstance(outcome, LLMTimeoutError) for outcome in outcomes), outcomes

            # The limit's worth of streams cut mid-answer: half cancelled, half closed by their reader.
            fake.token_delay_ms = 100
            streams = [provider.stream(MESSAGES) for _ in range(LIMIT)]
            firsts = await asyncio.gather(*(anext(stream) for stream in streams))
            assert all(isinstance(event, TextDelta) for event in firsts)
            assert provider.slots.in_use == LIMIT
            pending = [asyncio.create_task(anext(stream)) for stream in streams[:2]]
            await asyncio.sleep(0)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for stream in streams:
                await stream.aclose()
            fake.token_delay_ms = 0
            assert provider.slots.in_use == 0 and provider.slots.waiting == 0

            # The next 100 runs, all at once: each waits its turn and every one succeeds.
            waits.seconds.clear()
            results = await asyncio.gather(*(collect(provider) for _ in range(100)), return_exceptions=True)
            failures = [r for r in results if isinstance(r, BaseException)]
            assert failures == []
            assert all(isinstance(events[-1], LLMDone) for events in results)
            assert len(waits.seconds) == 100 and max(waits.seconds) > 0  # some really waited
            assert max(waits.waiters) >= 100 - LIMIT and waits.waiters[-1] == 0
            assert provider.slots.in_use == 0
        finally:
            await provider.aclose()


async def test_a_burst_waiting_longer_than_five_seconds_for_the_pool_all_succeeds() -> None:
    """60 calls of 0.6 s on a shared client of 5 connections: the last start after 6 s. They used to
    fail after the pool's 5 s ('timed out waiting for a free connection'); now they wait their turn."""
    fake = FakeOpenAI(tokens=20, token_delay_ms=30)
    async with running_fake_openai(fake) as (_, base_url), \
            httpx.AsyncClient(limits=httpx.Limits(max_connections=LIMIT, max_keepalive_connections=LIMIT)) as client:
        provider = OpenAICompatibleProvider(base_url=base_url, model="m", http_client=client)
        started = time.monotonic()
        results = await asyncio.gather(*(collect(provider) for _ in range(60)), return_exceptions=True)
    assert [r for r in results if isinstance(r, BaseException)] == []
    assert time.monotonic() - started > 5.0  # the burst really outlasted the old pool timeout


async def test_at_the_limit_a_call_fails_only_after_the_request_timeout() -> None:
    async with running_fake_openai() as (fake, base_url):
        waits = Waits()
        provider = provider_for(base_url, waits, request_timeout=0.5)
        try:
            fake.token_delay_ms = 200
            holders = [provider.stream(MESSAGES) for _ in range(LIMIT)]
            await asyncio.gather(*(anext(stream) for stream in holders))
            with pytest.raises(LLMTimeoutError, match="free connection") as caught:
                await collect(provider)
            assert caught.value.retryable
            assert waits.seconds[-1] >= 0.5
            for stream in holders:
                await stream.aclose()
            fake.token_delay_ms = 0
            assert isinstance((await collect(provider))[-1], LLMDone)  # the slots came back
        finally:
            await provider.aclose()


async def test_the_limit_and_the_wait_are_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_MAX_CONNECTIONS", "7")
    monkeypatch.setenv("LLM_REQUEST_TIMEOUT", "12.5")
    settings = LLMSettings(llm_provider="openai", llm_base_url="http://127.0.0.1:9/v1")
    assert settings.llm_max_connections == 7 and settings.llm_request_timeout == 12.5
    provider = build_provider(settings)
    assert isinstance(provider, OpenAICompatibleProvider) and provider.slots.limit == 7
    await provider.aclose()
    monkeypatch.setenv("LLM_MAX_CONNECTIONS", "0")
    with pytest.raises(ValueError, match="llm_max_connections"):
        LLMSettings()
