"""The direct path against a real OpenAI-compatible HTTP server: the reply is capped and the
system prompt is the configured one (DIRECT_LLM_MAX_TOKENS, DIRECT_LLM_SYSTEM_PROMPT)."""

from __future__ import annotations

import httpx
import pytest
from pydantic import ValidationError

from conversation_service.settings import ConversationSettings
from tests.integration.conversation_service.support import auth, make_settings, new_conversation, running
from tests.support.fake_openai import FakeOpenAI, TextReply, running_fake_openai

PROMPT = "You answer in two sentences at most."


async def test_direct_reply_request_carries_the_cap_and_the_system_prompt(database_url: str, monkeypatch) -> None:
    monkeypatch.setenv("DIRECT_LLM_MAX_TOKENS", "64")
    monkeypatch.setenv("DIRECT_LLM_SYSTEM_PROMPT", PROMPT)
    async with running_fake_openai() as (fake, api_root):
        monkeypatch.setenv("LLM_PROVIDER", "openai")
        monkeypatch.setenv("LLM_BASE_URL", api_root)
        settings = make_settings(database_url)
        async with running(settings) as (base, app), httpx.AsyncClient() as client:
            conv = await new_conversation(client, base, "alice")
            sent = await client.post(
                f"{base}/conversations/{conv['id']}/messages", json={"content": "Tell me about the sea"},
                headers=auth("alice"),
            )
            assert sent.status_code == 202 and sent.json()["route"]["target"] == "direct_llm"
            await app.state.tasks.join()
            messages = (await client.get(f"{base}/conversations/{conv['id']}/messages", headers=auth("alice"))).json()
    assert [(m["role"], m["status"]) for m in messages["items"]] == [("user", "complete"), ("assistant", "complete")]
    (request,) = fake.requests
    assert request.body["max_tokens"] == 64
    assert request.body["messages"][0] == {"role": "system", "content": PROMPT}
    assert request.body["messages"][-1] == {"role": "user", "content": "Tell me about the sea"}


def test_the_defaults_cap_every_reply_and_the_earlier_prompt_variable_is_read(monkeypatch) -> None:
    assert ConversationSettings().direct_llm_max_tokens == 512
    monkeypatch.setenv("DIRECT_SYSTEM_PROMPT", "earlier name")
    assert ConversationSettings().direct_llm_system_prompt == "earlier name"
    monkeypatch.setenv("DIRECT_LLM_MAX_TOKENS", "0")
    with pytest.raises(ValidationError, match="direct_llm_max_tokens"):
        ConversationSettings()


async def test_a_nul_in_the_model_s_reply_is_stored_and_a_user_s_nul_is_refused(database_url: str, monkeypatch) -> None:
    """PostgreSQL's text cannot hold a NUL: the model's is shown and stored as U+FFFD (the reply is
    not lost over it); the user's own message with one is refused with a clear error."""
    fake = FakeOpenAI()
    fake.enqueue(TextReply(text="before\x00after", chunk_chars=3))
    async with running_fake_openai(fake) as (_, api_root):
        monkeypatch.setenv("LLM_PROVIDER", "openai")
        monkeypatch.setenv("LLM_BASE_URL", api_root)
        async with running(make_settings(database_url)) as (base, app), httpx.AsyncClient() as client:
            conv = await new_conversation(client, base, "alice")
            url = f"{base}/conversations/{conv['id']}/messages"
            refused = await client.post(url, json={"content": "a\x00b"}, headers=auth("alice"))
            assert refused.status_code == 422 and "NUL" in refused.text
            sent = await client.post(url, json={"content": "Say something odd"}, headers=auth("alice"))
            assert sent.status_code == 202
            await app.state.tasks.join()
            messages = (await client.get(url, headers=auth("alice"))).json()["items"]
    assert [(m["role"], m["status"], m["content"]) for m in messages] == [
        ("user", "complete", "Say something odd"), ("assistant", "complete", "before\ufffdafter"),
    ]
