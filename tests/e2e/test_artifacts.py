"""What the agent makes for the user shows on its message in the chat page: a file to download
(the bytes the agent wrote), a link to open, data to read; it is still there after a reload, and
nothing in it runs as markup or script (a javascript: link is not made a link)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from conversation_service.realtime.frames import AgentArtifact
from shared.protocol import ArtifactData
from tests.e2e.support import assistant_after, chat_stack
from tests.e2e.test_page_product import open_chat, screenshot, send

pytestmark = pytest.mark.browser
HOSTILE = '<img src=x onerror="document.title=1">'


async def test_a_file_the_agent_writes_downloads_from_its_message_and_survives_a_reload(
    page: Page, tmp_path: Path,
) -> None:
    async with chat_stack(tmp_path) as stack:
        await open_chat(page, stack, "files")
        await send(page, "/agent what is 17*23")
        first = assistant_after(page, "/agent what is 17*23")
        await expect(first).to_have_attribute("data-status", "complete")
        answer = (await first.locator(".body").text_content() or "").strip()
        await send(page, "/agent save that as result.md")
        saved = assistant_after(page, "/agent save that as result.md")
        await expect(saved).to_have_attribute("data-status", "complete")

        item = saved.locator("li.artifact")
        await expect(item.locator("a.artifact-file")).to_have_text("result.md")
        await expect(item.locator(".artifact-meta")).to_have_text(f"text/markdown, {len(answer.encode())} B")
        async with page.expect_download() as info:
            await item.locator("a.artifact-file").click()
        download = await info.value
        assert download.suggested_filename == "result.md"
        assert Path(await download.path()).read_text() == answer
        await screenshot(page, "artifact-file", tmp_path, saved)

        await page.reload()
        await expect(page.locator("#connection")).to_have_text("Live")
        again = assistant_after(page, "/agent save that as result.md").locator("li.artifact a.artifact-file")
        await expect(again).to_have_text("result.md")


async def test_links_and_data_show_as_text_and_only_http_links_are_links(page: Page, tmp_path: Path) -> None:
    async with chat_stack(tmp_path) as stack:
        cid = await open_chat(page, stack, "links")
        await send(page, "/agent what is 2+2")
        reply = assistant_after(page, "/agent what is 2+2")
        await expect(reply).to_have_attribute("data-status", "complete")
        message_id = await reply.get_attribute("data-message-id")
        assert message_id
        emit = stack.state.realtime.publisher.emit
        made = [
            ArtifactData(artifact_id="l1", name="guide.pdf", media_type="application/pdf",
                         url="https://example.com/guide.pdf", description=HOSTILE),
            ArtifactData(artifact_id="d1", name=HOSTILE, media_type="application/json", data={"html": HOSTILE}),
        ]
        for artifact in made:
            await emit(cid, AgentArtifact.of(message_id, artifact))
        # A frame that did not come through the protocol's checks: its script link is not made a link.
        await emit(cid, AgentArtifact(message_id, "x1", "click me", "text/html", url="javascript:document.title=1"))

        items = reply.locator("li.artifact")
        await expect(items).to_have_count(3)
        link = items.nth(0).locator("a.artifact-link")
        await expect(link).to_have_attribute("href", "https://example.com/guide.pdf")
        await expect(link).to_have_attribute("rel", "noopener noreferrer")
        await expect(items.nth(0).locator(".artifact-description")).to_have_text(HOSTILE)
        await expect(items.nth(1).locator(".artifact-name")).to_have_text(HOSTILE)
        assert '"html": ' in (await items.nth(1).locator("pre.artifact-data").text_content() or "")
        await expect(items.nth(2).locator("a")).to_have_count(0)
        await expect(items.nth(2)).to_contain_text("link not shown")
        assert await reply.locator("img").count() == 0 and await page.title() != "1"
        await screenshot(page, "artifact-links-and-data", tmp_path, reply)
