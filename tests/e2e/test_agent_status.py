"""What the page shows when the agent's work goes wrong: a failed tool step, and the agent being
unreachable (the notice banner and the direct model's answer)."""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Page, expect

from tests.e2e.support import assistant_after, chat_stack

pytestmark = pytest.mark.browser


async def test_a_failed_tool_step_shows_as_failed(page: Page, tmp_path) -> None:
    async with chat_stack(tmp_path) as stack:
        await stack.conversation("failure")
        await page.goto(stack.page_url())
        await expect(page.locator("#connection")).to_have_text("Live")
        await page.locator("#content").fill("/agent what is 1/0")
        await page.locator("#send").click()

        reply = assistant_after(page, "/agent what is 1/0")
        await expect(reply).to_have_attribute("data-status", "complete")
        tool = reply.locator("li.tool[data-tool='calculator']")
        await expect(tool).to_have_attribute("data-state", "error")
        await expect(tool.locator(".tool-state")).to_have_text(re.compile(r"^failed after \S+ m?s$"))
        await expect(tool.locator(".tool-result")).to_contain_text("division by zero")


async def test_an_unreachable_agent_shows_a_notice_and_the_direct_answer(page: Page, tmp_path) -> None:
    async with chat_stack(tmp_path, agent_down=True) as stack:
        await stack.conversation("fallback")
        await page.goto(stack.page_url())
        await expect(page.locator("#connection")).to_have_text("Live")
        await page.locator("#content").fill("/agent what is 17*23")
        await page.locator("#send").click()

        await expect(page.locator("#banner")).to_have_attribute("data-kind", "notice")
        await expect(page.locator("#banner-text")).to_contain_text("temporarily unavailable")
        reply = assistant_after(page, "/agent what is 17*23")
        await expect(reply).to_have_attribute("data-status", "complete")
        await expect(reply.locator(".body")).not_to_be_empty()
        await expect(reply.locator("li.tool")).to_have_count(0)
        await expect(page.locator("#status")).to_have_text("")
