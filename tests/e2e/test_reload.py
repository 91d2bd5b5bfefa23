"""Nothing on the page is lost on a reload: a reply that is still streaming shows every character
it showed before and then carries on (also in a second tab opened mid-reply), and the agent's
question and approval cards come back in the state they were left in."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from playwright.async_api import Page, expect

from tests.e2e.support import assistant_after, chat_stack
from tests.e2e.test_page_product import screenshot, send
from tests.support.fake_openai import FakeOpenAI, TextReply
from tests.support.servers import serve_app

pytestmark = pytest.mark.browser

# Plain words in one paragraph: the message's text on screen is exactly the model's text.
STORY = " ".join(f"word{i}" for i in range(140)) + "."

# Every text the first assistant message shows, with its status, from the moment the page starts:
# a reload that showed only the tokens after it, even for one frame, is on record.
RECORDER = """
window.__shown = [];
document.addEventListener("DOMContentLoaded", () => {
  new MutationObserver(() => {
    const li = document.querySelector("#messages li.msg.assistant");
    if (!li) return;
    const text = li.querySelector(".body").textContent;
    const last = window.__shown[window.__shown.length - 1];
    if (!last || last[1] !== text || last[0] !== li.dataset.status) window.__shown.push([li.dataset.status, text]);
  }).observe(document.getElementById("messages"),
             { subtree: true, childList: true, characterData: true, attributes: true, attributeFilter: ["data-status"] });
});
"""


@asynccontextmanager
async def slow_model(monkeypatch, token_delay_ms: float) -> AsyncIterator[FakeOpenAI]:
    """The direct path's model, an OpenAI-compatible server writing one piece per token_delay_ms."""
    fake = FakeOpenAI(token_delay_ms=token_delay_ms)
    async with serve_app(fake.app) as url:
        monkeypatch.setenv("LLM_PROVIDER", "openai")
        monkeypatch.setenv("LLM_BASE_URL", f"{url}/v1")
        yield fake


async def _shown_after_reload(page: Page, before: str) -> list[list[str]]:
    reply = page.locator("#messages li.msg.assistant").first
    await expect(reply).to_have_attribute("data-status", "complete", timeout=30_000)
    shown = await page.evaluate("window.__shown")
    # Still streaming when the page came back: what it showed first came from the snapshot.
    assert shown and shown[0][0] == "streaming", shown[:3]
    assert all(text.startswith(before) for status, text in shown), [t[:40] for _, t in shown if not t.startswith(before)]
    assert any(status == "streaming" and len(text) > len(before) for status, text in shown), "it did not carry on"
    # Every delta once: the snapshot's and the replayed ones are not both added.
    assert shown[-1] == ["complete", STORY]
    texts = [text for _, text in shown]
    assert texts == sorted(texts, key=len), "the text went back"
    return shown


async def test_a_reload_mid_reply_keeps_every_character_shown_before_it(page: Page, tmp_path, monkeypatch) -> None:
    async with slow_model(monkeypatch, token_delay_ms=40) as fake, chat_stack(tmp_path) as stack:
        fake.enqueue(TextReply(text=STORY, chunk_chars=4))
        cid = await stack.conversation("Story")
        await page.goto(stack.page_url())
        await expect(page.locator("#connection")).to_have_text("Live")
        await page.context.add_init_script(RECORDER)

        await send(page, "Tell me a story")
        body = assistant_after(page, "Tell me a story").locator(".body")
        await expect(body).to_have_text(re.compile(r"word25 "))
        before = await body.text_content()
        await page.reload()
        await expect(page.locator("#connection")).to_have_text("Live")
        # Still the one live region: the message being written, not the list.
        await expect(page.locator("#messages li.msg.assistant")).to_have_attribute("aria-live", "polite")
        assert await page.locator("#messages").get_attribute("aria-live") is None

        # A second tab opened mid-reply shows the text so far as well, then the rest.
        second = await page.context.new_page()
        await second.goto(stack.page_url() + f"#c={cid}")  # a tab of its own signs in with its own token
        await expect(second.locator("#connection")).to_have_text("Live")
        second_before = await second.locator("#messages li.msg.assistant .body").text_content()
        assert second_before.startswith(before)

        await _shown_after_reload(page, before)
        await _shown_after_reload(second, before)
        await second.close()


async def test_cards_keep_their_state_over_a_reload(page: Page, tmp_path) -> None:
    delegation = {"ask_user_timeout_s": 6.0, "agent_cleanup_interval_s": 0.2}
    async with chat_stack(tmp_path, profile="careful", delegation=delegation) as stack:
        cid = await stack.conversation("Cards")
        await page.goto(stack.page_url())
        await expect(page.locator("#connection")).to_have_text("Live")
        cards = page.locator(".question-card")

        await send(page, "/agent what is 17*23")
        await cards.nth(0).get_by_role("button", name="Approve").click()
        await expect(cards.nth(0)).to_have_attribute("data-decision", "approved")
        await send(page, "/agent what is 6*7")
        await cards.nth(1).get_by_role("button", name="Deny").click()
        await expect(cards.nth(1)).to_have_attribute("data-decision", "denied")
        await expect(page.locator("#messages li.msg.assistant[data-status='complete']")).to_have_count(4)  # two asked, two replied
        await send(page, "/agent plan a trip")
        await expect(cards.nth(2)).to_have_attribute("data-state", "open")
        await send(page, "Lisbon for 3 days")  # answered in the composer, not on the card
        await expect(cards.nth(2)).to_have_attribute("data-decision", "answered")
        await expect(assistant_after(page, "Lisbon for 3 days")).to_have_attribute("data-status", "complete")
        await send(page, "/agent plan a trip")
        await expect(cards.nth(3)).to_have_attribute("data-state", "open")

        settled = [("answered", "approved", "Approved by you"), ("answered", "denied", "Denied by you"),
                   ("answered", "answered", "You answered: Lisbon for 3 days")]

        async def states() -> list[tuple[str | None, str | None, str]]:
            return [(await c.get_attribute("data-state"), await c.get_attribute("data-decision"),
                     (await c.locator(".card-decision").text_content()).strip()) for c in await cards.all()]

        # Pending: after a reload the last question still takes an answer.
        await page.reload()
        await expect(page.locator("#connection")).to_have_text("Live")
        await expect(cards).to_have_count(4)
        assert await states() == [*settled, ("open", None, "")]
        await expect(cards.nth(3).locator("input.answer-input")).to_be_enabled()
        await expect(page.locator("#status")).to_have_text("The agent is waiting for your answer.")
        await screenshot(page, "cards-after-reload", tmp_path)

        # Expired while the page is open, then reloaded: it says it expired, not that the agent moved on.
        await expect(cards.nth(3)).to_have_attribute("data-state", "expired", timeout=15_000)
        await page.reload()
        await expect(page.locator("#connection")).to_have_text("Live")
        await expect(cards).to_have_count(4)
        assert await states() == [*settled, ("expired", None, "")]
        await expect(cards.nth(3).locator(".card-note")).to_have_text(
            "This question expired. Send a new message to start again."
        )
        await expect(cards.nth(3).locator("input.answer-input")).to_be_disabled()
        await expect(page.locator(".question-card", has_text="no longer waiting")).to_have_count(0)
        assert [m["content"] for m in await stack.messages(cid) if m["role"] == "user"] == [
            "/agent what is 17*23", "approve", "/agent what is 6*7", "deny", "/agent plan a trip",
            "Lisbon for 3 days", "/agent plan a trip",
        ]
