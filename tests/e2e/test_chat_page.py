"""The chat page in a real Chromium against both services on loopback: a user's whole session."""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Page, expect

from tests.e2e.support import assistant_after, chat_stack, screen_messages, token

pytestmark = pytest.mark.browser

# Records what the page shows over time: each assistant message's text length as it grows, and
# every text the status line takes, so a test can tell streaming from a reply shown at once.
RECORDER = """
() => {
  window.__lengths = {};
  window.__statuses = [];
  const record = () => {
    for (const li of document.querySelectorAll('#messages li.msg.assistant')) {
      const id = li.dataset.messageId, len = li.querySelector('.body').textContent.length;
      const seen = (window.__lengths[id] = window.__lengths[id] || []);
      if (seen[seen.length - 1] !== len) seen.push(len);
    }
    const status = document.getElementById('status').textContent;
    if (status && window.__statuses[window.__statuses.length - 1] !== status) window.__statuses.push(status);
  };
  new MutationObserver(record).observe(document.querySelector('.chat'),
    { subtree: true, childList: true, characterData: true });
}
"""


async def send(page: Page, text: str) -> None:
    await page.locator("#content").fill(text)
    await page.locator("#send").click()
    # The composer empties once the server accepted the message.
    await expect(page.locator("#content")).to_have_value("")


async def test_a_user_session_in_the_browser(page: Page, tmp_path, monkeypatch) -> None:
    # The direct LLM paces its chunks, so the reply visibly streams in.
    monkeypatch.setenv("LLM_BUILTIN_CHUNK_DELAY_MS", "25")
    async with chat_stack(tmp_path) as stack:
        await page.goto(stack.page_url())
        # The token is taken from the address bar and removed from it.
        await expect(page.locator("#who")).to_have_text("alice")
        assert "token=" not in page.url
        await expect(page.locator("#empty-list")).to_be_visible()

        await page.locator("#new-conversation").click()
        await expect(page.locator("#conversations button.active")).to_have_count(1)
        await expect(page.locator("#connection")).to_have_text("Live")
        await page.evaluate(RECORDER)

        # A direct reply, streamed: its text grows over several frames before it is complete.
        await expect(page.locator("#chat-title")).to_have_text("New conversation")
        await send(page, "hello")
        await expect(page.locator("#messages li.msg.user .body")).to_have_text(["hello"])
        # The conversation is titled after its first message.
        await expect(page.locator("#chat-title")).to_have_text("hello")
        await expect(page.locator("#conversations button.active")).to_have_text("hello")
        reply = assistant_after(page, "hello")
        await expect(reply).to_have_attribute("data-status", "complete")
        reply_text = await reply.locator(".body").text_content()
        assert reply_text and len(reply_text) > 10
        lengths = (await page.evaluate("window.__lengths"))[await reply.get_attribute("data-message-id")]
        assert lengths == sorted(lengths) and lengths[-1] == len(reply_text), lengths
        assert len([n for n in lengths if 0 < n < len(reply_text)]) >= 2, f"not streamed: {lengths}"

        # The agent calculates: the tool step shows running, then done with its duration.
        await send(page, "/agent what is 17*23")
        answer = assistant_after(page, "/agent what is 17*23")
        await expect(answer).to_have_attribute("data-status", "complete")
        await expect(answer.locator(".body")).to_contain_text("391")
        tool = answer.locator("li.tool[data-tool='calculator']")
        await expect(tool).to_have_attribute("data-state", "ok")
        await expect(tool.locator(".tool-state")).to_have_text(re.compile(r"^done in \S+ m?s$"))
        await expect(tool.locator(".tool-args")).to_contain_text("17*23")
        statuses = await page.evaluate("window.__statuses")
        assert "Agent is thinking…" in statuses, statuses
        assert "Running calculator…" in statuses, statuses
        await expect(page.locator("#status")).to_have_text("")

        # The agent asks a question: a card with an answer box; the answer resumes the run.
        await send(page, "/agent plan a trip")
        card = page.locator(".question-card[data-kind='question']")
        await expect(card).to_have_attribute("data-state", "open")
        await expect(page.locator("#status")).to_have_text("The agent is waiting for your answer.")
        await page.screenshot(path=str(tmp_path / "question.png"))
        await card.locator("input.answer-input").fill("Lisbon for 3 days")
        await card.locator("button.answer-send").click()
        await expect(card).to_have_attribute("data-state", "answered")
        await expect(card.locator("input.answer-input")).to_be_disabled()
        await expect(card.locator("button.answer-send")).to_be_disabled()
        plan = assistant_after(page, "Lisbon for 3 days")
        await expect(plan).to_have_attribute("data-status", "complete")
        await expect(plan.locator(".body")).to_contain_text("Lisbon")
        await expect(plan.locator(".body")).to_contain_text("3-day plan")

        # Markup in a message is shown as text and never runs.
        attack = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script><b>bold?</b>'
        await send(page, attack)
        await expect(page.locator("#messages li.msg.user .body").last).to_have_text(attack)
        await expect(assistant_after(page, attack)).to_have_attribute("data-status", "complete")
        assert await page.evaluate("window.__xss") is None
        assert await page.locator("#messages img, #messages script, #messages b").count() == 0

        before = await screen_messages(page)
        assert [role for _, role, _ in before].count("user") == 5  # hello, 17*23, trip, answer, attack

        # A reload shows the same conversation from the history, nothing lost or doubled.
        await page.reload()
        await expect(page.locator("#connection")).to_have_text("Live")
        await expect(page.locator("#messages li.msg")).to_have_count(len(before))
        assert await screen_messages(page) == before
        await expect(page.locator("#who")).to_have_text("alice")
        tool = assistant_after(page, "/agent what is 17*23").locator("li.tool[data-tool='calculator']")
        await expect(tool).to_have_attribute("data-state", "ok")
        # Answered: the card stays, in the state it was left in; no question is open.
        await expect(page.locator(".question-card")).to_have_count(1)
        await expect(page.locator(".question-card[data-state='open']")).to_have_count(0)
        await expect(card.locator(".card-decision")).to_have_text("You answered: Lisbon for 3 days")

        await page.screenshot(path=str(tmp_path / "chat.png"), full_page=True)
        assert (tmp_path / "chat.png").stat().st_size > 10_000


async def test_token_field_and_titles_are_text(page: Page, tmp_path) -> None:
    async with chat_stack(tmp_path) as stack:
        title = '<img src=x onerror="window.__xss=3">Trip ideas'
        await stack.conversation(title=title)
        await page.goto(stack.url + "/")
        await expect(page.locator("#token-form")).to_be_visible()
        await expect(page.locator("#new-conversation")).to_be_disabled()

        # A wrong token is refused with words a user understands, and the field comes back.
        await page.locator("#token").fill("not-a-token")
        await page.locator("#token-form button").click()
        await expect(page.locator("#banner")).to_contain_text("not signed in")
        await expect(page.locator("#token-form")).to_be_visible()

        await page.locator("#token").fill(token("alice"))
        await page.locator("#token-form button").click()
        await expect(page.locator("#who")).to_have_text("alice")
        await expect(page.locator("#conversations button")).to_have_text([title])
        await expect(page.locator("#chat-title")).to_have_text(title)
        assert await page.evaluate("window.__xss") is None
        assert await page.locator("#conversations img, #chat-title img").count() == 0
