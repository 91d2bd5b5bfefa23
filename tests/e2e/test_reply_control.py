"""Control over a running reply on the chat page: Stop (in place of Send while a reply streams)
ends the reply in every tab and in storage; a failed reply offers Retry, also after a reload,
and the last answer offers Regenerate."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from playwright.async_api import Page, expect

from tests.e2e.support import assistant_after, chat_stack
from tests.e2e.test_page_product import send
from tests.support.fake_openai import ErrorReply, FakeOpenAI, TextReply
from tests.support.servers import serve_app

pytestmark = pytest.mark.browser

# Plain words in one paragraph: the message's text on screen is exactly the model's text.
STORY = " ".join(f"word{i}" for i in range(400)) + "."


@asynccontextmanager
async def model(monkeypatch, *replies, token_delay_ms: float = 0.0) -> AsyncIterator[FakeOpenAI]:
    """The direct path's model: an OpenAI-compatible server answering with ``replies`` in turn."""
    fake = FakeOpenAI(token_delay_ms=token_delay_ms)
    fake.enqueue(*replies)
    async with serve_app(fake.app) as url:
        monkeypatch.setenv("LLM_PROVIDER", "openai")
        monkeypatch.setenv("LLM_BASE_URL", f"{url}/v1")
        yield fake


async def test_stop_ends_the_reply_in_two_tabs_and_in_storage(page: Page, tmp_path, monkeypatch) -> None:
    async with (model(monkeypatch, TextReply(text=STORY, chunk_chars=6), token_delay_ms=40),
                chat_stack(tmp_path) as stack):
        cid = await stack.conversation("Story")
        await page.goto(stack.page_url())
        await expect(page.locator("#connection")).to_have_text("Live")
        stop = page.get_by_role("button", name="Stop the reply")
        await expect(stop).to_be_hidden()

        await send(page, "Tell me a story")
        reply = assistant_after(page, "Tell me a story")
        await expect(reply.locator(".body")).to_have_text(re.compile(r"word10 "))
        # While it streams, Stop stands in place of Send.
        await expect(stop).to_be_visible()
        await expect(page.locator("#send")).to_be_hidden()
        second = await page.context.new_page()
        await second.goto(stack.page_url() + f"#c={cid}")
        await expect(second.locator("#connection")).to_have_text("Live")
        await expect(second.get_by_role("button", name="Stop the reply")).to_be_visible()

        # From the keyboard.
        await stop.focus()
        await page.keyboard.press("Enter")
        for tab in (page, second):
            shown = tab.locator("#messages li.msg.assistant").first
            await expect(shown).to_have_attribute("data-status", "stopped")
            await expect(shown.locator(".stopped-text")).to_be_visible()
            await expect(tab.locator("#send")).to_be_visible()
            await expect(tab.get_by_role("button", name="Stop the reply")).to_be_hidden()
        text = await reply.locator(".body").text_content()
        assert await second.locator("#messages li.msg.assistant .body").text_content() == text
        stored = (await stack.messages(cid))[-1]
        # Markdown trims the paragraph's trailing space; the words are the same.
        assert (stored["status"], stored["content"].strip()) == ("stopped", text.strip())
        assert 10 < len(text.split()) < 400

        # A reload shows it stopped, with Regenerate on it as the last answer.
        await page.reload()
        await expect(page.locator("#connection")).to_have_text("Live")
        shown = page.locator("#messages li.msg.assistant").first
        await expect(shown).to_have_attribute("data-status", "stopped")
        await expect(shown.get_by_role("button", name="Regenerate this answer")).to_be_visible()
        await second.close()


async def test_retry_on_a_failed_reply(page: Page, tmp_path, monkeypatch) -> None:
    async with (model(monkeypatch, ErrorReply(400, "refused"), TextReply(text="Recovered answer.")),
                chat_stack(tmp_path) as stack):
        cid = await stack.conversation("Retry")
        await page.goto(stack.page_url())
        await expect(page.locator("#connection")).to_have_text("Live")
        await send(page, "Please answer")
        failed = assistant_after(page, "Please answer")
        await expect(failed).to_have_attribute("data-status", "error")
        await expect(failed.get_by_role("button", name="Retry this reply")).to_be_visible()
        # The Retry is still there after a reload (the message list has the status).
        await page.reload()
        await expect(page.locator("#connection")).to_have_text("Live")
        retry = page.get_by_role("button", name="Retry this reply")
        await expect(retry).to_be_visible()
        failed_id = await page.locator("#messages li.msg.assistant").first.get_attribute("data-message-id")

        await retry.click()
        answer = page.locator("#messages li.msg.assistant")
        await expect(answer).to_have_count(1)  # the failed reply gave its place to the new one
        await expect(answer).to_have_attribute("data-status", "complete")
        await expect(answer.locator(".body")).to_have_text("Recovered answer.")
        assert await answer.get_attribute("data-message-id") != failed_id
        await expect(answer.get_by_role("button", name="Regenerate this answer")).to_be_visible()
        await expect(page.get_by_role("button", name="Retry this reply")).to_have_count(0)
        stored = [(m["role"], m["status"]) for m in await stack.messages(cid)]
        assert stored == [("user", "complete"), ("assistant", "replaced"), ("assistant", "complete")]
