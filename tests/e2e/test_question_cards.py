"""The agent's questions on the page: approval cards (Approve / Deny with the tool and its
arguments), and answers the server refuses (answered elsewhere: 409; expired: 410)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from playwright.async_api import Page, expect

from tests.e2e.support import SocketGate, chat_stack, wait_until

pytestmark = pytest.mark.browser

# The decision shows on the card, not as a message: the agent's reply follows the card itself.
AGENT_REPLY_AFTER_CARD = "xpath=following-sibling::li[contains(concat(' ', @class, ' '), ' assistant ')][1]"


async def test_approve_and_deny_a_tool_call(page: Page, tmp_path) -> None:
    # The "careful" profile asks before every calculator call.
    async with chat_stack(tmp_path, profile="careful") as stack:
        cid = await stack.conversation("approvals")
        await page.goto(stack.page_url())
        await expect(page.locator("#connection")).to_have_text("Live")

        await page.locator("#content").fill("/agent what is 17*23")
        await page.locator("#send").click()
        card = page.locator(".question-card[data-kind='approval']")
        await expect(card).to_have_attribute("data-state", "open")
        await expect(card.locator(".tool-name")).to_have_text("calculator")
        await expect(card.locator(".approval-args")).to_contain_text('"expression": "17*23"')
        await expect(page.locator("#status")).to_have_text("The agent is waiting for your answer.")
        await page.screenshot(path=str(tmp_path / "approval.png"))

        await card.locator("button.approve").click()
        await expect(card).to_have_attribute("data-state", "answered")
        await expect(card.locator(".card-decision")).to_have_text("Approved by you")
        await expect(card.locator("button.approve")).to_be_disabled()
        await expect(card.locator("button.deny")).to_be_disabled()
        result = card.locator(AGENT_REPLY_AFTER_CARD)
        await expect(result).to_have_attribute("data-status", "complete")
        await expect(result.locator(".body")).to_contain_text("391")
        await expect(result.locator("li.tool[data-tool='calculator']")).to_have_attribute("data-state", "ok")

        # Denied: the tool never runs and the agent still answers.
        await page.locator("#content").fill("/agent what is 6*7")
        await page.locator("#send").click()
        second = page.locator(".question-card[data-kind='approval'][data-state='open']")
        await expect(second.locator(".approval-args")).to_contain_text('"expression": "6*7"')
        await second.locator("button.deny").click()
        denied = page.locator(".question-card[data-kind='approval']").nth(1)
        await expect(denied).to_have_attribute("data-state", "answered")
        await expect(denied.locator(".card-decision")).to_have_text("Denied by you")
        reply = denied.locator(AGENT_REPLY_AFTER_CARD)
        await expect(reply).to_have_attribute("data-status", "complete")
        await expect(reply.locator("li.tool")).to_have_count(0)
        await expect(reply.locator(".body")).not_to_contain_text("42")
        assert (await reply.locator(".body").text_content()).strip()

        server = [m for m in await stack.messages(cid) if m["role"] == "user"]
        assert [m["content"] for m in server] == [
            "/agent what is 17*23",
            "approve",
            "/agent what is 6*7",
            "deny",
        ]


async def _pending_question(stack, cid: str) -> dict:
    async def asked() -> bool:
        return (await stack.agent_session(cid)).get("pending_question") is not None

    await wait_until(asked, what="the agent's question")
    return (await stack.agent_session(cid))["pending_question"]


async def test_a_question_answered_elsewhere_shows_a_readable_conflict(page: Page, tmp_path) -> None:
    async with chat_stack(tmp_path) as stack:
        cid = await stack.conversation("trip")
        await stack.send(cid, "/agent plan a trip")
        question = await _pending_question(stack, cid)

        # The page is offline: it shows the pending question from the REST history, but does not
        # hear that another device answers it first.
        gate = SocketGate()
        gate.is_open = False
        await gate.install(page)
        await page.goto(stack.page_url())
        card = page.locator(f".question-card[data-question-id='{question['question_id']}']")
        await expect(card).to_have_attribute("data-state", "open")
        assert (await stack.answer(cid, question["question_id"], "Lisbon for 3 days")).status_code == 202

        await card.locator("input.answer-input").fill("Porto")
        await card.locator("button.answer-send").click()
        await expect(card.locator(".card-error")).to_have_text("This question was answered already.")
        await expect(card).to_have_attribute("data-state", "closed")
        await expect(card.locator("input.answer-input")).to_be_disabled()
        await expect(card.locator("button.answer-send")).to_be_disabled()


async def test_an_expired_question_shows_a_readable_error(page: Page, tmp_path) -> None:
    async with chat_stack(tmp_path, delegation={"ask_user_timeout_s": 1.0}) as stack:
        cid = await stack.conversation("trip")
        await stack.send(cid, "/agent plan a trip")
        question = await _pending_question(stack, cid)

        gate = SocketGate()
        gate.is_open = False  # the expiry notice must not close the card before the user answers
        await gate.install(page)
        await page.goto(stack.page_url())
        card = page.locator(f".question-card[data-question-id='{question['question_id']}']")
        await expect(card).to_have_attribute("data-state", "open")
        await expect(card.locator(".card-note")).to_contain_text("Waiting for your answer until")

        expires_at = datetime.fromisoformat(question["expires_at"])
        await wait_until(lambda: datetime.now(UTC) > expires_at, what="the question's expiry")
        await card.locator("input.answer-input").fill("Lisbon")
        await card.locator("button.answer-send").click()
        await expect(card.locator(".card-error")).to_have_text(
            "The question expired before it was answered; send a new message to start again."
        )
        await expect(card).to_have_attribute("data-state", "expired")
        await expect(card.locator("input.answer-input")).to_be_disabled()


async def test_a_question_that_expires_while_open_closes_its_card(page: Page, tmp_path) -> None:
    delegation = {"ask_user_timeout_s": 1.0, "agent_cleanup_interval_s": 0.2}
    async with chat_stack(tmp_path, delegation=delegation) as stack:
        await stack.conversation("trip")
        await page.goto(stack.page_url())
        await expect(page.locator("#connection")).to_have_text("Live")
        await page.locator("#content").fill("/agent plan a trip")
        await page.locator("#send").click()
        card = page.locator(".question-card[data-kind='question']")
        await expect(card).to_have_attribute("data-state", "open")

        # The cleanup job expires it and tells every client: the card closes, the banner says why.
        await expect(card).to_have_attribute("data-state", "expired")
        await expect(card.locator("input.answer-input")).to_be_disabled()
        await expect(card.locator(".card-note")).to_have_text(
            "This question expired. Send a new message to start again."
        )
        await expect(page.locator("#banner")).to_have_attribute("data-kind", "notice")
        await expect(page.locator("#banner-text")).not_to_be_empty()
