"""The same engine behind the OpenAI-compatible provider: streamed tool calls over real HTTP, a
model endpoint that is down ending the run with a retryable ERROR, and runs at the LLM connection
limit waiting their turn."""

from __future__ import annotations

import asyncio

import orjson

from agent_service.app import create_app
from shared.llm.config import LLMSettings
from shared.llm.openai import OpenAICompatibleProvider
from tests.integration.agent_service.conftest import AgentClient, make_settings
from tests.support.fake_openai import ErrorReply, FakeOpenAI, TextReply, ToolCallReply, running_fake_openai
from tests.support.servers import free_port, serve_app


async def test_tool_call_streamed_by_an_openai_compatible_model(agent_factory) -> None:
    fake = FakeOpenAI()
    fake.enqueue(
        ToolCallReply(calls=[("calculator", {"expression": "17*23"})], fragment_chars=3),
        TextReply(text="17 times 23 is 391.", chunk_chars=4),
    )
    async with running_fake_openai(fake) as (_, api_root):
        provider = OpenAICompatibleProvider(base_url=api_root, model="fake-model", api_key="sk-test")
        try:
            async with agent_factory(provider=provider) as agent:
                result = await agent.execute("what is 17*23")
        finally:
            await provider.aclose()
    types = [e.type.value for e in result.events]
    assert types[:2] == ["TOOL_START", "TOOL_END"] and types[-1] == "COMPLETE"
    assert result.events[1].data["result"] == {"expression": "17*23", "result": 391}
    assert result.last.data["answer"] == "17 times 23 is 391."
    assert "".join(e.data["text"] for e in result.of_type("ANSWER_CHUNK")) == result.last.data["answer"]
    # The model was offered the profile's tools and got the tool result back.
    first, second = fake.requests[0].body, fake.requests[1].body
    assert {t["function"]["name"] for t in first["tools"]} == {
        "calculator", "knowledge_search", "current_time", "ask_user", "create_file", "share_link", "emit_data",
    }
    assert second["messages"][-1]["role"] == "tool"
    assert orjson.loads(second["messages"][-1]["content"])["result"] == 391


async def test_model_endpoint_down_is_a_retryable_error(agent_factory) -> None:
    provider = OpenAICompatibleProvider(
        base_url=f"http://127.0.0.1:{free_port()}/v1", model="m", connect_timeout=2, read_timeout=2
    )
    try:
        async with agent_factory(provider=provider) as agent:
            result = await agent.execute("hello")
            status = await agent.status(result.last.session_id)
    finally:
        await provider.aclose()
    assert [e.type.value for e in result.events] == ["ERROR"]
    assert result.last.data["code"] == "LLM_UNAVAILABLE" and result.last.data["retryable"] is True
    assert status["status"] == "FAILED"


async def test_model_rejecting_the_request_is_not_retryable(agent_factory) -> None:
    fake = FakeOpenAI()
    fake.enqueue(ErrorReply(status=400, message="bad request"))
    async with running_fake_openai(fake) as (_, api_root):
        provider = OpenAICompatibleProvider(base_url=api_root, model="m")
        try:
            async with agent_factory(provider=provider) as agent:
                result = await agent.execute("hello")
        finally:
            await provider.aclose()
    assert result.last.data["code"] == "LLM_ERROR" and result.last.data["retryable"] is False


async def test_runs_at_the_llm_connection_limit_wait_their_turn_and_the_wait_is_a_metric(database_url) -> None:
    fake = FakeOpenAI(tokens=10, token_delay_ms=20)
    async with running_fake_openai(fake) as (_, api_root):
        llm = LLMSettings(llm_provider="openai", llm_base_url=api_root, llm_max_connections=2, llm_request_timeout=30)
        settings = make_settings(database_url, llm=llm)
        async with serve_app(create_app(settings)) as url:
            agent = AgentClient(url, settings)
            try:
                results = await asyncio.gather(*(agent.execute("hello") for _ in range(6)))
                metrics = (await agent.http.get("/metrics")).text
            finally:
                await agent.aclose()
    # Six runs on two connections: none failed, four waited their turn.
    assert [r.last.type.value for r in results] == ["COMPLETE"] * 6
    assert "agent_llm_connection_wait_seconds_count 6.0" in metrics
    waited = next(line for line in metrics.splitlines() if line.startswith("agent_llm_connection_wait_seconds_sum"))
    assert float(waited.split()[-1]) > 0.1
    assert "agent_llm_connection_waiters 0.0" in metrics
