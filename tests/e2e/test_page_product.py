"""The chat page as a product: answers in Markdown that cannot run markup, the working indicator, the
agent's thinking and tool steps, approval decisions on their cards, the phone layout, dark mode.

Set SCREENSHOT_DIR to keep the screenshots of the main states (docs/screenshots/ holds one run's).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Locator, Page, WebSocketRoute, expect

from conversation_service.realtime.frames import AgentToolEnd, AgentToolStart
from tests.e2e.support import assistant_after, chat_stack
from tests.e2e.test_question_cards import AGENT_REPLY_AFTER_CARD
from tests.support.fake_openai import FakeOpenAI, TextReply
from tests.support.servers import serve_app

pytestmark = pytest.mark.browser

MODEL_ANSWER = """## The plan

Here is **the plan**, with `inline code` and a [link to the docs](https://example.com/docs).

1. First step
2. Second step

```python
print("hello")
```

<script>window.__xss = 1</script>

Markup stays text: <img src=x onerror="window.__xss = 2"> and [a trap](javascript:window.__xss=3), \
![a pixel](https://tracker.invalid/p.png).

Done."""
CODE = 'print("hello")'


class FrameHold:
    """Sits between the page and the server's WebSocket. Frames pass until ``hold_from(match)``;
    from the first frame that matches, it and every later one wait, in order, until ``release()``."""

    def __init__(self) -> None:
        self._match: Callable[[dict[str, Any]], bool] | None = None
        self.held: list[tuple[WebSocketRoute, str]] = []
        self.holding = False

    async def install(self, page: Page) -> None:
        await page.route_web_socket("**/ws*", self._route)

    def _route(self, ws: WebSocketRoute) -> None:
        server = ws.connect_to_server()
        server.on_message(lambda message: self._from_server(ws, message))

    def _from_server(self, ws: WebSocketRoute, message: str | bytes) -> None:
        if not self.holding and self._match is not None and self._match(json.loads(message)):
            self.holding = True
        if self.holding:
            self.held.append((ws, message))
        else:
            ws.send(message)

    def hold_from(self, match: Callable[[dict[str, Any]], bool]) -> None:
        self._match = match

    def held_types(self) -> list[str]:
        return [json.loads(message)["type"] for _, message in self.held]

    def release(self) -> None:
        self.holding, self._match = False, None
        held, self.held = self.held, []
        for ws, message in held:
            ws.send(message)


@asynccontextmanager
async def browser_page(browser: Browser, **options: Any) -> AsyncIterator[Page]:
    """A page in a context of its own (a phone, a dark system); a JavaScript error fails the test."""
    context = await browser.new_context(**{"viewport": {"width": 1100, "height": 720}, **options})
    context.set_default_timeout(15_000)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page
    finally:
        await context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@asynccontextmanager
async def fake_model(monkeypatch, *replies: TextReply) -> AsyncIterator[FakeOpenAI]:
    """An OpenAI-compatible model for the direct path, answering with these replies in turn."""
    fake = FakeOpenAI()
    fake.enqueue(*replies)
    async with serve_app(fake.app) as url:
        monkeypatch.setenv("LLM_PROVIDER", "openai")
        monkeypatch.setenv("LLM_BASE_URL", f"{url}/v1")
        yield fake


async def screenshot(page: Page, name: str, tmp_path: Path, part: Locator | None = None) -> None:
    """The page (or one part of it) as SCREENSHOT_DIR/name.png, or in the test's tmp_path."""
    folder = Path(os.environ.get("SCREENSHOT_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    await page.evaluate("document.activeElement && document.activeElement.blur()")
    options = {"path": str(folder / f"{name}.png"), "animations": "disabled", "caret": "hide"}
    await (part or page).screenshot(**options)
    assert (folder / f"{name}.png").stat().st_size > 5_000


async def send(page: Page, text: str) -> None:
    await page.locator("#content").fill(text)
    await page.locator("#content").press("Enter")
    await expect(page.locator("#content")).to_have_value("")


async def open_chat(page: Page, stack, title: str = "Product tour") -> str:
    cid = await stack.conversation(title)
    await page.goto(stack.page_url())
    await expect(page.locator("#connection")).to_have_text("Live")
    return cid


async def test_an_answer_streams_as_markdown_and_markup_in_it_never_runs(
    page: Page, tmp_path, monkeypatch
) -> None:
    replies = TextReply(text=MODEL_ANSWER, chunk_chars=3), TextReply(text="Shown just as you typed it.")
    async with fake_model(monkeypatch, *replies), chat_stack(tmp_path) as stack:
        requests: list[str] = []
        page.on("request", lambda request: requests.append(request.url))
        hold = FrameHold()
        await hold.install(page)
        cid = await open_chat(page, stack)
        await page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=stack.url)
        assert await page.locator("#messages").get_attribute("aria-live") is None

        # Every delta reaches the page; the completed message waits.
        hold.hold_from(lambda frame: frame["type"] == "message.completed")
        await send(page, "Show me a plan")
        reply = assistant_after(page, "Show me a plan")
        body = reply.locator(".body")
        await expect(body.locator("p").last).to_have_text("Done.")
        assert hold.held_types() == ["message.completed"]
        # Only the message being written is a live region.
        await expect(reply).to_have_attribute("data-status", "streaming")
        await expect(reply).to_have_attribute("aria-live", "polite")
        assert await page.locator("#messages [aria-live]").count() == 1
        streamed = await body.inner_html()

        hold.release()
        await expect(reply).to_have_attribute("data-status", "complete")
        await expect(reply).not_to_have_attribute("aria-live", re.compile(".*"))
        assert await page.locator("#messages [aria-live]").count() == 0
        # The deltas alone rendered the whole answer: the completed text changes nothing.
        assert await body.inner_html() == streamed
        await expect(reply.locator(".who")).to_have_text("Assistant")

        await expect(body.locator("h2")).to_have_text("The plan")
        await expect(body.locator("strong")).to_have_text("the plan")
        await expect(body.locator("ol > li")).to_have_text(["First step", "Second step"])
        await expect(body.locator("p code")).to_have_text("inline code")
        await expect(body.locator("pre code")).to_have_text(CODE + "\n")
        link = body.get_by_role("link", name="link to the docs")
        await expect(link).to_have_attribute("href", "https://example.com/docs")
        await expect(link).to_have_attribute("target", "_blank")
        await expect(link).to_have_attribute("rel", "noopener noreferrer")

        # Markup from the model is shown as text and never runs; the image is a link, not fetched.
        await expect(body).to_contain_text("<script>window.__xss = 1</script>")
        await expect(body).to_contain_text('<img src=x onerror="window.__xss = 2">')
        trap = body.locator("a", has_text="a trap")
        assert await trap.get_attribute("href") is None
        await trap.click()
        assert await page.locator("#messages script, #messages img, #messages iframe").count() == 0
        assert await page.evaluate("window.__xss") is None
        await expect(body.get_by_role("link", name="a pixel")).to_have_attribute(
            "href", "https://tracker.invalid/p.png"
        )
        assert all(url.startswith(stack.url) for url in requests), requests
        assert any(url.endswith("/ui/vendor/marked.umd.js") for url in requests)

        # Copy buttons: the code block's code, the whole answer as the model wrote it.
        await reply.get_by_role("button", name="Copy code").click()
        assert await page.evaluate("navigator.clipboard.readText()") == CODE
        copy_answer = reply.get_by_role("button", name="Copy answer")
        await copy_answer.focus()
        await page.keyboard.press("Enter")
        await expect(copy_answer).to_have_attribute("data-copied", "true")
        assert await page.evaluate("navigator.clipboard.readText()") == MODEL_ANSWER
        stored = [m for m in await stack.messages(cid) if m["role"] == "assistant"]
        assert [m["content"] for m in stored] == [MODEL_ANSWER]

        # What the user types is shown as typed, Markdown included.
        await send(page, "**not bold** <b>nor this</b>")
        await expect(page.locator("#messages li.msg.user .body").last).to_have_text("**not bold** <b>nor this</b>")
        await expect(assistant_after(page, "**not bold** <b>nor this</b>")).to_have_attribute("data-status", "complete")
        await screenshot(page, "light", tmp_path)


async def test_a_working_indicator_shows_from_sending_until_the_reply_begins(page: Page, tmp_path) -> None:
    async with chat_stack(tmp_path) as stack:
        hold = FrameHold()
        await hold.install(page)
        await open_chat(page, stack)
        typing = page.locator("#typing")
        await expect(typing).to_be_hidden()

        hold.hold_from(lambda frame: True)
        await send(page, "hello")  # the server accepted it: the composer is empty
        await expect(typing).to_be_visible()
        await expect(typing).to_have_attribute("role", "status")
        assert await page.locator("#messages li").count() == 0  # no frame has arrived yet

        hold.release()
        await expect(assistant_after(page, "hello")).to_have_attribute("data-status", "complete")
        await expect(typing).to_be_hidden()


async def test_the_fallback_notice_shows_at_once_while_the_indicator_waits(page: Page, tmp_path) -> None:
    async with chat_stack(tmp_path, agent_down=True) as stack:
        hold = FrameHold()
        await hold.install(page)
        await open_chat(page, stack)
        hold.hold_from(lambda frame: frame["type"] == "message.created" and frame["data"]["role"] == "assistant")
        await send(page, "/agent what is 17*23")
        await expect(page.locator("#banner")).to_have_attribute("data-kind", "notice")
        await expect(page.locator("#banner-text")).to_contain_text("temporarily unavailable")
        await expect(page.locator("#typing")).to_be_visible()

        hold.release()
        await expect(assistant_after(page, "/agent what is 17*23")).to_have_attribute("data-status", "complete")
        await expect(page.locator("#typing")).to_be_hidden()


async def test_the_agents_thinking_and_tool_calls(page: Page, tmp_path) -> None:
    async with chat_stack(tmp_path) as stack:
        cid = await open_chat(page, stack)
        await send(page, "hello")
        await expect(assistant_after(page, "hello").locator(".who")).to_have_text("Assistant")

        await send(page, "/agent what time is it")
        answer = assistant_after(page, "/agent what time is it")
        await expect(answer).to_have_attribute("data-status", "complete")
        await expect(answer.locator(".who")).to_have_text("Agent")

        # The thinking is folded away until asked for, by keyboard too.
        thinking = answer.locator("details.thinking")
        await expect(thinking.locator("summary")).to_have_text("Thinking")
        await expect(thinking.locator(".thought")).to_be_hidden()
        await thinking.locator("summary").focus()
        await page.keyboard.press("Enter")
        await expect(thinking.locator(".thought")).to_be_visible()
        await expect(thinking.locator(".thought")).to_have_text(re.compile("The user wants the current time"))

        # The tool's result is shown as indented JSON with its state and duration.
        tool = answer.locator("li.tool[data-tool='current_time']")
        await expect(tool).to_have_attribute("data-state", "ok")
        await expect(tool.locator(".tool-state")).to_have_text(re.compile(r"^done in \S+ m?s$"))
        await expect(tool.locator(".tool-args")).to_be_hidden()  # called without arguments
        result = await tool.locator(".tool-result").text_content()
        assert result.startswith('{\n  "timezone": "UTC",'), result
        assert set(json.loads(result)) >= {"timezone", "iso", "date", "time"}
        await expect(tool.locator(".show-more")).to_be_hidden()

        # A long result is folded behind "Show more"; a running call says so until it ends.
        message_id = await answer.get_attribute("data-message-id")
        long_result = {"results": [{"title": f"Document {i}", "snippet": "word " * 12} for i in range(12)]}
        emit = stack.state.realtime.publisher.emit
        await emit(cid, AgentToolStart(message_id, "c-long", "knowledge_search", {"query": "deploy", "top_k": 12}))
        long_tool = answer.locator("li.tool[data-call-id='c-long']")
        await expect(long_tool).to_have_attribute("data-state", "running")
        await expect(long_tool.locator(".tool-state")).to_have_text("running…")
        await expect(long_tool.locator(".tool-args")).to_have_text('{\n  "query": "deploy",\n  "top_k": 12\n}')
        await emit(cid, AgentToolEnd(message_id, "c-long", "knowledge_search", True, 1520.0, None,
                                     json.dumps(long_result)))
        await expect(long_tool.locator(".tool-state")).to_have_text("done in 1.5 s")
        shown = long_tool.locator(".tool-result")
        more = long_tool.get_by_role("button", name="Show more")
        await expect(shown).to_have_class(re.compile(r"\bfolded\b"))
        assert await shown.evaluate("e => e.scrollHeight > e.clientHeight + 20")
        await screenshot(page, "tool-call", tmp_path, part=answer)
        await expect(more).to_have_attribute("aria-expanded", "false")
        await more.focus()
        await page.keyboard.press("Enter")
        await expect(shown).not_to_have_class(re.compile(r"\bfolded\b"))
        await expect(long_tool.get_by_role("button", name="Show less")).to_have_attribute("aria-expanded", "true")
        assert json.loads(await shown.text_content()) == long_result


async def test_approval_decisions_show_on_their_cards(page: Page, tmp_path) -> None:
    async with chat_stack(tmp_path, profile="careful") as stack:
        cid = await open_chat(page, stack, "Approvals")
        await send(page, "/agent what is 17*23")
        card = page.locator(".question-card[data-kind='approval']").first
        await expect(card).to_have_attribute("data-state", "open")
        await expect(page.locator("#status")).to_have_text("The agent is waiting for your answer.")
        await screenshot(page, "approval", tmp_path)

        await card.get_by_role("button", name="Approve").click()
        await expect(card.locator(".card-decision")).to_have_text("Approved by you")
        await expect(card.locator("button.approve")).to_be_hidden()
        result = card.locator(AGENT_REPLY_AFTER_CARD)
        await expect(result).to_have_attribute("data-status", "complete")
        await expect(result.locator(".body")).to_contain_text("391")

        # Answered in the composer instead of on the card: the card says so.
        await send(page, "/agent what is 6*7")
        second = page.locator(".question-card[data-kind='approval']").nth(1)
        await expect(second).to_have_attribute("data-state", "open")
        await send(page, "no, skip it")
        await expect(second).to_have_attribute("data-state", "answered")
        await expect(second.locator(".card-decision")).to_have_text("You answered: no, skip it")
        await expect(second.locator(AGENT_REPLY_AFTER_CARD)).to_have_attribute("data-status", "complete")

        # The approval is not a chat message of the user's, now or after a reload.
        stored = [m["content"] for m in await stack.messages(cid) if m["role"] == "user"]
        assert stored == ["/agent what is 17*23", "approve", "/agent what is 6*7", "no, skip it"]
        for reloaded in (False, True):
            if reloaded:
                await page.reload()
                await expect(page.locator("#connection")).to_have_text("Live")
            user_texts = page.locator("#messages li.msg.user .body")
            await expect(user_texts).to_have_text(["/agent what is 17*23", "/agent what is 6*7", "no, skip it"])
            await expect(page.locator(".question-card .card-decision")).to_have_text(
                ["Approved by you", "You answered: no, skip it"]
            )
            await expect(page.locator(".question-card[data-state='open']")).to_have_count(0)


async def test_a_question_answered_in_the_composer_marks_its_card(page: Page, tmp_path) -> None:
    async with chat_stack(tmp_path) as stack:
        await open_chat(page, stack, "Trip")
        await send(page, "/agent plan a trip")
        card = page.locator(".question-card[data-kind='question']")
        await expect(card).to_have_attribute("data-state", "open")
        await screenshot(page, "question", tmp_path)

        await send(page, "Lisbon for 3 days")
        await expect(card).to_have_attribute("data-state", "answered")
        await expect(card.locator(".card-decision")).to_have_text("You answered: Lisbon for 3 days")
        await expect(card).not_to_contain_text("no longer waiting")
        plan = assistant_after(page, "Lisbon for 3 days")
        await expect(plan.locator(".body")).to_contain_text("3-day plan")


async def test_the_phone_layout(browser: Browser, tmp_path) -> None:
    async with browser_page(browser, viewport={"width": 390, "height": 760}, is_mobile=True, has_touch=True) as page, \
            chat_stack(tmp_path) as stack:
        await stack.conversation("Older conversation")
        await open_chat(page, stack, "Phone")
        no_sideways_scroll = "document.scrollingElement.scrollWidth <= window.innerWidth"

        # The conversation list is behind the header's toggle; the composer has the width.
        sidebar = page.locator("#sidebar")
        toggle = page.get_by_role("button", name="Conversations")
        await expect(sidebar).to_be_hidden()
        await expect(toggle).to_have_attribute("aria-expanded", "false")
        assert (await page.locator("#content").bounding_box())["width"] >= 250
        assert (await page.locator(".topbar").bounding_box())["height"] < 60  # one row: name, user, buttons
        await expect(page.locator(".brand-name")).to_be_visible()
        await send(page, "/agent what is 17*23 " + "x" * 120)
        await send(page, "https://example.com/" + "a-very-long-path/" * 12)
        await expect(page.locator("#messages li.msg.assistant[data-status='complete']")).to_have_count(2)
        assert await page.evaluate(no_sideways_scroll)
        await screenshot(page, "phone", tmp_path)

        # By keyboard: open the list, Escape closes it and gives the focus back; pick a conversation.
        await toggle.focus()
        await page.keyboard.press("Enter")
        await expect(sidebar).to_be_visible()
        await expect(toggle).to_have_attribute("aria-expanded", "true")
        await expect(page.locator("#conversations button[aria-current='true']")).to_be_focused()
        await page.keyboard.press("Escape")
        await expect(sidebar).to_be_hidden()
        await expect(toggle).to_be_focused()
        await page.keyboard.press("Enter")
        await page.locator("#conversations button", has_text="Older conversation").click()
        await expect(sidebar).to_be_hidden()
        await expect(page.locator("#chat-title")).to_have_text("Older conversation")
        await expect(page.locator("#content")).to_be_focused()

        await page.set_viewport_size({"width": 360, "height": 700})
        assert await page.evaluate(no_sideways_scroll)
        assert (await page.locator("#content").bounding_box())["width"] >= 220
        # Renaming fits too: the title field takes the header's room.
        await page.get_by_role("button", name="Rename").click()
        field = page.get_by_role("textbox", name="Conversation title")
        await expect(field).to_be_focused()
        assert (await field.bounding_box())["width"] >= 120
        assert await page.evaluate(no_sideways_scroll)


async def test_dark_mode_follows_the_system_and_the_toggle_is_remembered(browser: Browser, tmp_path) -> None:
    async with browser_page(browser, color_scheme="dark") as page, chat_stack(tmp_path) as stack:
        page_background = "getComputedStyle(document.body).backgroundColor"
        await open_chat(page, stack, "Dark")
        root = page.locator("html")
        toggle = page.get_by_role("button", name="Dark mode")
        await expect(root).to_have_attribute("data-theme", "dark")
        await expect(toggle).to_have_attribute("aria-pressed", "true")
        dark = await page.evaluate(page_background)
        await send(page, "/agent what is 17*23")
        await expect(assistant_after(page, "/agent what is 17*23")).to_have_attribute("data-status", "complete")
        await screenshot(page, "dark", tmp_path)

        await toggle.focus()
        await page.keyboard.press("Space")
        await expect(root).to_have_attribute("data-theme", "light")
        await expect(toggle).to_have_attribute("aria-pressed", "false")
        assert await page.evaluate(page_background) != dark
        assert await page.evaluate("localStorage.getItem('taskforce.theme')") == "light"
        await page.reload()
        await expect(root).to_have_attribute("data-theme", "light")  # the choice beats the system's
        await toggle.click()
        await expect(root).to_have_attribute("data-theme", "dark")
        assert await page.evaluate(page_background) == dark


async def test_the_product_name_and_icon(page: Page, tmp_path) -> None:
    async with chat_stack(tmp_path) as stack:
        await page.goto(stack.page_url())
        await expect(page).to_have_title("TaskForce")
        await expect(page.locator("h1.brand")).to_have_text("TaskForce")
        icon = await page.locator("link[rel='icon']").get_attribute("href")
        r = await stack.http.get(stack.url + icon)
        assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
        assert r.text.lstrip().startswith("<svg")
