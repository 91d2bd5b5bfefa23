"""The page's WebSocket: resuming with ``after_seq`` after a dropped connection, unknown frame
types, notices; and the composer's in-flight and idempotency behaviour."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.async_api import Page, Route, expect

from conversation_service.realtime.frames import FrameData, Notice
from tests.e2e.support import SocketGate, assistant_after, chat_stack, screen_messages, wait_until

pytestmark = pytest.mark.browser


@dataclass(frozen=True, slots=True)
class PlanUpdated(FrameData):
    """A frame type of a later server version, which this page does not know."""

    TYPE: ClassVar[str] = "agent.plan_updated"
    message_id: str
    text: str


def after_seq_of(url: str) -> int:
    return int(parse_qs(urlsplit(url).query)["after_seq"][0])


async def test_a_dropped_connection_resumes_after_the_last_seq_without_duplicates(
    page: Page, tmp_path
) -> None:
    async with chat_stack(tmp_path) as stack:
        cid = await stack.conversation("resume")
        gate = SocketGate()
        await gate.install(page)
        await page.goto(stack.page_url())
        await expect(page.locator("#connection")).to_have_text("Live")
        assert after_seq_of(gate.urls[0]) == 0
        # The page takes batches: the replay after the reconnect below (the whole agent turn it
        # missed) comes as one ``batch`` message, which the page must unpack in order.
        assert parse_qs(urlsplit(gate.urls[0]).query)["batch"] == ["1"]

        await page.locator("#content").fill("hello")
        await page.locator("#send").click()
        await expect(assistant_after(page, "hello")).to_have_attribute("data-status", "complete")

        # The network drops. The page says so and keeps retrying, with growing pauses.
        await gate.cut()
        await expect(page.locator("#connection")).to_have_attribute("data-state", "waiting")
        await expect(page.locator("#connection")).to_contain_text("retrying in")

        # Meanwhile the conversation goes on from another device: a whole agent turn.
        await stack.send(cid, "/agent what is 17*23")

        async def answered() -> bool:
            items = await stack.messages(cid)
            return any(
                m["role"] == "assistant" and "391" in m["content"] and m["status"] == "complete"
                for m in items
            )

        await wait_until(answered, what="the agent's answer on the server")
        await wait_until(lambda: gate.refused >= 3, what="three refused reconnects")
        refused_urls = gate.urls[1:]
        # Exponential backoff: each pause about twice the one before (jitter is at most 20 %).
        first, second, third = gate.attempted_at[1:4]
        assert third - second > 1.3 * (second - first), gate.attempted_at
        resumed_from = {after_seq_of(u) for u in refused_urls}
        assert len(resumed_from) == 1 and resumed_from.pop() > 0, refused_urls

        # The network is back: the page resumes after the last frame it saw and shows what it missed.
        gate.restore()
        answer = assistant_after(page, "/agent what is 17*23")
        await expect(answer).to_have_attribute("data-status", "complete")
        await expect(answer.locator("li.tool[data-tool='calculator']")).to_have_attribute("data-state", "ok")
        await expect(page.locator("#connection")).to_have_text("Live")
        assert after_seq_of(gate.urls[-1]) == after_seq_of(refused_urls[0])

        # Exactly what the server has, each message once, no text doubled by a replayed delta.
        server = await stack.messages(cid)
        shown = await screen_messages(page)
        assert [[m["id"], m["role"], m["content"]] for m in server] == shown
        await expect(answer.locator("li.tool")).to_have_count(1)


async def test_unknown_frames_are_ignored_and_notices_show_as_a_banner(page: Page, tmp_path) -> None:
    async with chat_stack(tmp_path) as stack:
        cid = await stack.conversation("frames")
        await page.goto(stack.page_url())
        await expect(page.locator("#connection")).to_have_text("Live")
        await page.locator("#content").fill("hello")
        await page.locator("#send").click()
        await expect(assistant_after(page, "hello")).to_have_attribute("data-status", "complete")
        before = await screen_messages(page)

        # A frame type this page does not know (added by a later server version), then a notice.
        await stack.state.realtime.publisher.emit(cid, PlanUpdated(before[-1][0], "<b>x</b>"))
        await stack.state.realtime.publisher.emit(cid, Notice("maintenance", "<i>Maintenance</i> at noon"))
        banner = page.locator("#banner")
        await expect(banner).to_be_visible()
        await expect(banner).to_have_attribute("data-kind", "notice")
        await expect(page.locator("#banner-text")).to_have_text("<i>Maintenance</i> at noon")
        assert await banner.locator("i").count() == 0
        assert await screen_messages(page) == before

        # The stream goes on after the unknown frame, and the banner can be dismissed.
        await page.locator("#banner-close").click()
        await expect(banner).to_be_hidden()
        await page.locator("#content").fill("still there?")
        await page.locator("#send").click()
        await expect(assistant_after(page, "still there?")).to_have_attribute("data-status", "complete")


async def test_the_composer_sends_each_message_once(page: Page, tmp_path) -> None:
    async with chat_stack(tmp_path) as stack:
        cid = await stack.conversation("composer")
        posts: list[dict] = []
        release = asyncio.Event()
        lose_next_response = False

        async def hold_posts(route: Route) -> None:
            nonlocal lose_next_response
            if route.request.method != "POST":
                await route.continue_()
                return
            posts.append(json.loads(route.request.post_data or "{}"))
            await release.wait()
            if lose_next_response:
                # The server gets the message, the answer never reaches the page.
                lose_next_response = False
                await route.fetch()
                await route.abort("connectionreset")
                return
            await route.continue_()

        await page.route("**/conversations/*/messages", hold_posts)
        await page.goto(stack.page_url())
        await expect(page.locator("#connection")).to_have_text("Live")
        send = page.locator("#send")
        await expect(send).to_be_disabled()  # nothing typed yet

        # While the first send is on its way the button is disabled; a double click and an extra
        # Enter send nothing more.
        await page.locator("#content").fill("only once")
        await send.dblclick()
        await page.locator("#content").press("Enter")
        await wait_until(lambda: len(posts) == 1, what="the first POST")
        await expect(send).to_be_disabled()
        release.set()
        await expect(page.locator("#content")).to_have_value("")
        await expect(assistant_after(page, "only once")).to_have_attribute("data-status", "complete")
        assert len(posts) == 1

        # The response is lost after the server stored the message: the page says so and keeps the
        # text; sending again reuses the client_message_id, so the server creates nothing new.
        lose_next_response = True
        await page.locator("#content").fill("lost answer")
        await send.click()
        await expect(page.locator("#banner-text")).to_have_text(
            "The server cannot be reached. Check your connection and try again."
        )
        await expect(page.locator("#content")).to_have_value("lost answer")
        await send.click()
        await expect(page.locator("#content")).to_have_value("")
        assert len(posts) == 3
        assert posts[1]["client_message_id"] == posts[2]["client_message_id"] != posts[0]["client_message_id"]

        await expect(assistant_after(page, "lost answer")).to_have_attribute("data-status", "complete")
        server = await stack.messages(cid)
        assert [m["content"] for m in server if m["role"] == "user"] == ["only once", "lost answer"]
        shown = await screen_messages(page)
        assert [s[2] for s in shown if s[1] == "user"] == ["only once", "lost answer"]
