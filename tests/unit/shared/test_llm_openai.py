"""The OpenAI-compatible provider against a real fake server on loopback."""

from __future__ import annotations

import logging

import httpx
import pytest
from pydantic import SecretStr

from shared.fastpath.aiohttp_transport import AiohttpTransport
from shared.llm.base import (
    DEFAULT_OPTIONS,
    CompletionOptions,
    LLMConnectionError,
    LLMDone,
    LLMMessage,
    LLMProtocolError,
    LLMProvider,
    LLMStatusError,
    LLMTimeoutError,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolSpec,
)
from shared.llm.openai import OpenAICompatibleProvider, to_openai_messages
from shared.tokens import count_messages_tokens, count_tokens
from tests.support.fake_openai import (
    ErrorReply,
    FakeOpenAI,
    RawReply,
    TextReply,
    ToolCallReply,
    running_fake_openai,
)
from tests.support.servers import free_port

CALC = ToolSpec(
    name="calculator",
    description="Evaluate arithmetic",
    parameters={"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
)
MESSAGES = [LLMMessage(role="system", content="You are helpful."), LLMMessage(role="user", content="hi")]


@pytest.fixture
async def fake():
    async with running_fake_openai() as (server, base_url):
        server.base_url = base_url
        yield server


@pytest.fixture
async def client():
    async with httpx.AsyncClient(transport=AiohttpTransport(max_connections=10)) as c:
        yield c


def provider_for(base_url: str, client: httpx.AsyncClient, **kwargs) -> OpenAICompatibleProvider:
    kwargs.setdefault("read_timeout", 5.0)
    return OpenAICompatibleProvider(base_url=base_url, model="test-model", http_client=client, **kwargs)


async def collect(provider, messages=MESSAGES, tools=(), options=DEFAULT_OPTIONS):
    return [e async for e in provider.stream(messages, tools=tools, options=options)]


async def test_plain_text_streams_in_chunks_with_usage(fake: FakeOpenAI, client) -> None:
    fake.enqueue(TextReply(text="Hello there, how can I help you today?", chunk_chars=5))
    provider = provider_for(fake.base_url, client, api_key=SecretStr("sk-test-key"))
    assert isinstance(provider, LLMProvider)
    events = await collect(provider)
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) == 8
    assert "".join(d.text for d in deltas) == "Hello there, how can I help you today?"
    assert events[-1] == LLMDone(prompt_tokens=11, completion_tokens=8, finish_reason="stop", response_model="fake-model")
    request = fake.requests[-1]
    assert request.authorization == "Bearer sk-test-key"
    assert request.body["stream"] is True
    assert request.body["stream_options"] == {"include_usage": True}
    assert request.body["model"] == "test-model"
    assert request.body["messages"] == [{"role": "system", "content": "You are helpful."},
                                        {"role": "user", "content": "hi"}]
    assert "tools" not in request.body


async def test_options_reach_the_request(fake: FakeOpenAI, client) -> None:
    provider = provider_for(fake.base_url, client)
    await collect(provider, tools=[CALC], options=CompletionOptions(model="other", max_tokens=50, temperature=0.2,
                                                                    extra={"top_p": 0.9}))
    body = fake.requests[-1].body
    assert fake.requests[-1].authorization is None
    assert (body["model"], body["max_tokens"], body["temperature"], body["top_p"]) == ("other", 50, 0.2, 0.9)
    assert body["tools"] == [{"type": "function", "function": {
        "name": "calculator", "description": "Evaluate arithmetic", "parameters": CALC.parameters}}]


async def test_the_purpose_stays_local_and_the_prompt_is_sent(fake: FakeOpenAI, client) -> None:
    """A summary request reaches a real model as its system prompt; the purpose marker is not sent."""
    await collect(provider_for(fake.base_url, client), options=CompletionOptions(purpose="summary"))
    body = fake.requests[-1].body
    assert "purpose" not in body
    assert body["messages"][0] == {"role": "system", "content": "You are helpful."}


async def test_usage_is_counted_locally_when_the_endpoint_sends_none(fake: FakeOpenAI, client) -> None:
    fake.enqueue(TextReply(text="Counting my own tokens here.", usage=False))
    events = await collect(provider_for(fake.base_url, client))
    done = events[-1]
    assert done.prompt_tokens == count_messages_tokens([("system", "You are helpful."), ("user", "hi")])
    assert done.completion_tokens == count_tokens("Counting my own tokens here.")


async def test_two_parallel_tool_calls_assembled_from_fragments(fake: FakeOpenAI, client) -> None:
    fake.enqueue(ToolCallReply(
        calls=[("calculator", {"expression": "17*23"}), ("knowledge_search", {"query": "circuit breaker", "top_k": 3})],
        fragment_chars=2,
    ))
    events = await collect(provider_for(fake.base_url, client), tools=[CALC])
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert calls == [
        ToolCall(id="call_fake_0", name="calculator", arguments={"expression": "17*23"}),
        ToolCall(id="call_fake_1", name="knowledge_search", arguments={"query": "circuit breaker", "top_k": 3}),
    ]
    assert isinstance(events[-1], LLMDone) and events[-1].finish_reason == "tool_calls"
    assert events[-1].completion_tokens > 20  # one per fragment: they really were split


async def test_reasoning_deltas_from_both_field_names(fake: FakeOpenAI, client) -> None:
    provider = provider_for(fake.base_url, client)
    for field in ("reasoning_content", "reasoning"):
        fake.enqueue(TextReply(text="42.", reasoning="Let me think about it.", reasoning_field=field))
        events = await collect(provider)
        reasoning = [e for e in events if isinstance(e, ReasoningDelta)]
        assert "".join(e.text for e in reasoning) == "Let me think about it."
        assert len(reasoning) > 1
        first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
        assert all(isinstance(e, ReasoningDelta) for e in events[:first_text])


async def test_transcript_with_tool_calls_is_sent_in_wire_format(fake: FakeOpenAI, client) -> None:
    call = ToolCall(id="call_1", name="calculator", arguments={"expression": "2+2"})
    transcript = [
        LLMMessage(role="user", content="what is 2+2"),
        LLMMessage(role="assistant", content="", tool_calls=(call,)),
        LLMMessage(role="tool", content='{"result": 4}', tool_call_id="call_1", name="calculator"),
    ]
    await collect(provider_for(fake.base_url, client), messages=transcript)
    assert fake.requests[-1].body["messages"] == to_openai_messages(transcript) == [
        {"role": "user", "content": "what is 2+2"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression":"2+2"}'}}
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"result": 4}'},
    ]


@pytest.mark.parametrize(("status", "retryable"), [(400, False), (401, False), (429, True), (500, True), (503, True)])
async def test_http_errors_are_mapped_with_the_body_message(fake: FakeOpenAI, client, status, retryable) -> None:
    fake.enqueue(ErrorReply(status=status, message=f"model said no ({status})"))
    with pytest.raises(LLMStatusError) as caught:
        await collect(provider_for(fake.base_url, client))
    assert caught.value.status_code == status
    assert caught.value.retryable is retryable
    assert f"model said no ({status})" in str(caught.value)


async def test_plain_text_error_body(fake: FakeOpenAI, client) -> None:
    fake.enqueue(ErrorReply(status=502, raw_body="upstream exploded"))
    with pytest.raises(LLMStatusError, match="upstream exploded"):
        await collect(provider_for(fake.base_url, client))


async def test_error_inside_an_open_stream(fake: FakeOpenAI, client) -> None:
    fake.enqueue(RawReply(data=['{"error": {"message": "out of memory", "code": 503}}']))
    with pytest.raises(LLMStatusError, match="out of memory") as caught:
        await collect(provider_for(fake.base_url, client))
    assert caught.value.status_code == 503


async def test_connection_refused(client) -> None:
    provider = provider_for(f"http://127.0.0.1:{free_port()}/v1", client)
    with pytest.raises(LLMConnectionError) as caught:
        await collect(provider)
    assert caught.value.retryable


async def test_read_timeout(fake: FakeOpenAI, client) -> None:
    fake.enqueue(TextReply(text="too late", ttft_ms=1500))
    provider = provider_for(fake.base_url, client, read_timeout=0.3)
    with pytest.raises(LLMTimeoutError) as caught:
        await collect(provider)
    assert caught.value.retryable


@pytest.mark.parametrize(
    "data",
    [
        ["{not json"],
        ['["a list"]'],
        [('{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c", "function": '
         '{"name": "calculator", "arguments": "{\\"expression\\": "}}]}, "finish_reason": "tool_calls"}]}')],
        [('{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, '
         '"finish_reason": "tool_calls"}]}')],
        ['{"choices": "nope"}'],
    ],
    ids=["not-json", "not-an-object", "invalid-tool-json", "tool-without-name", "bad-choices"],
)
async def test_malformed_chunks_are_protocol_errors(fake: FakeOpenAI, client, data) -> None:
    fake.enqueue(RawReply(data=data))
    with pytest.raises(LLMProtocolError):
        await collect(provider_for(fake.base_url, client))


async def test_invalid_tool_arguments_from_fragments(fake: FakeOpenAI, client) -> None:
    fake.enqueue(ToolCallReply(calls=[("calculator", {})], raw_arguments={0: '{"expression": "1+'}))
    with pytest.raises(LLMProtocolError, match="invalid JSON arguments"):
        await collect(provider_for(fake.base_url, client), tools=[CALC])


async def test_stream_cut_before_the_end_is_a_connection_error(fake: FakeOpenAI, client) -> None:
    fake.enqueue(RawReply(data=['{"choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": null}]}']))
    with pytest.raises(LLMConnectionError, match="ended before"):
        await collect(provider_for(fake.base_url, client))


async def test_not_an_event_stream(fake: FakeOpenAI, client) -> None:
    fake.app.add_route("/v2/chat/completions", lambda request: httpx_json_response(), methods=["POST"])
    with pytest.raises(LLMProtocolError, match="event stream"):
        await collect(provider_for(fake.base_url.replace("/v1", "/v2"), client))


def httpx_json_response():
    from starlette.responses import JSONResponse

    return JSONResponse({"choices": []})


async def test_finish_without_done_marker_is_accepted(fake: FakeOpenAI, client) -> None:
    fake.enqueue(TextReply(text="fine", send_done=False))
    events = await collect(provider_for(fake.base_url, client))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "fine"
    assert events[-1].finish_reason == "stop"


async def test_the_api_key_is_never_logged(fake: FakeOpenAI, client, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fake.enqueue(TextReply(text="ok"), ErrorReply(status=401, message="bad key"))
    provider = provider_for(fake.base_url, client, api_key="sk-super-secret-123")
    await collect(provider)
    with pytest.raises(LLMStatusError):
        await collect(provider)
    assert caplog.records
    for record in caplog.records:
        assert "sk-super-secret-123" not in record.getMessage()
        assert "sk-super-secret-123" not in str(record.__dict__)


async def test_an_owned_client_is_closed(fake: FakeOpenAI) -> None:
    provider = OpenAICompatibleProvider(base_url=fake.base_url, model="m")
    fake.enqueue(TextReply(text="own client"))
    events = await collect(provider)
    assert events[-1].finish_reason == "stop"
    await provider.aclose()
    assert provider._client.is_closed


async def test_many_tokens_stream_through(fake: FakeOpenAI, client) -> None:
    fake.enqueue(TextReply(tokens=300))
    events = await collect(provider_for(fake.base_url, client))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text.split() == [f"token{i}" for i in range(300)]


async def test_fake_server_runs_on_its_own_for_load_tests(tmp_path, client) -> None:
    from tests.support.servers import ServiceProcess

    server = ServiceProcess("tests.support.fake_openai", env={})
    await server.start(tmp_path)
    try:
        events = await collect(provider_for(f"{server.url}/v1", client))
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert len(text.split()) == 200  # the command's default --tokens
        assert events[-1].completion_tokens == 200
    finally:
        await server.stop()
