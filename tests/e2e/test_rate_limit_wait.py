"""An agent message over its organisation's rate limit: the page shows that the agent waits, why,
and a countdown, then the answer once the window has room."""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Page, expect

from shared.rate_limit import RateLimitSettings
from tests.e2e.support import assistant_after, chat_stack

pytestmark = pytest.mark.browser


async def test_the_page_counts_down_a_rate_limit_wait_then_shows_the_answer(page: Page, tmp_path) -> None:
    limits = RateLimitSettings(requests=2, window_s=3)
    async with chat_stack(tmp_path, agent_overrides={"rate_limit": limits}) as stack:
        await stack.conversation("limits")
        await page.goto(stack.page_url())
        await expect(page.locator("#connection")).to_have_text("Live")
        for text in ("/agent hello there", "/agent hi again"):
            await page.locator("#content").fill(text)
            await page.locator("#send").click()
            await expect(assistant_after(page, text)).to_have_attribute("data-status", "complete")

        await page.locator("#content").fill("/agent one more")
        await page.locator("#send").click()
        status = page.locator("#status")
        await expect(status).to_contain_text("Waiting: rate limit of 2 requests per 3 s reached for organisation")
        await expect(status).to_have_text(re.compile(r"carries on in [1-3] s…$"))
        first = await status.text_content()
        reply = assistant_after(page, "/agent one more")
        await expect(reply).to_have_attribute("data-waiting", "true")
        await expect(status).not_to_have_text(first or "")  # it counts down
        await expect(reply).to_have_attribute("data-status", "complete")
        await expect(reply).not_to_have_attribute("data-waiting", "true")
        await expect(status).to_have_text("")
