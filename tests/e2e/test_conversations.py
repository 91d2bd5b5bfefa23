"""Managing conversations on the page, by keyboard: search over titles, rename, delete (also seen
from a second page); and a conversation that is not yours does not open."""

from __future__ import annotations

import pytest
from playwright.async_api import Dialog, Page, expect

from tests.e2e.support import chat_stack
from tests.e2e.test_page_product import screenshot

pytestmark = pytest.mark.browser


async def _open(page: Page, url: str) -> None:
    await page.goto(url)
    await expect(page.locator("#connection")).to_have_text("Live")


async def test_search_rename_and_delete_by_keyboard(page: Page, tmp_path) -> None:
    async with chat_stack(tmp_path) as stack:
        for title in ("Budget 2027", "Lisbon restaurants", "Trip to Lisbon"):
            await stack.conversation(title)
        await _open(page, stack.page_url())
        await expect(page.locator("#chat-title")).to_have_text("Trip to Lisbon")  # the most recent
        titles = page.locator("#conversations .conversation-title")

        # Search: the box follows the New conversation button; the list narrows as one types.
        await page.locator("#new-conversation").focus()
        await page.keyboard.press("Tab")
        await expect(page.locator("#search")).to_be_focused()
        await page.keyboard.type("LISBON")
        await expect(titles).to_have_text(["Trip to Lisbon", "Lisbon restaurants"])
        await page.keyboard.press("Tab")
        await page.keyboard.press("Tab")
        await expect(page.locator("#conversations button", has_text="Lisbon restaurants")).to_be_focused()
        await page.keyboard.press("Enter")
        await expect(page.locator("#chat-title")).to_have_text("Lisbon restaurants")
        await page.locator("#search").fill("nothing like it")
        await expect(titles).to_have_count(0)
        await expect(page.locator("#empty-list")).to_have_text("No conversation title matches your search.")
        await page.locator("#search").fill("")
        await expect(titles).to_have_count(3)
        await screenshot(page, "conversations", tmp_path)

        # Rename: Enter on the button opens the field with the title selected; Escape leaves it as it was.
        rename = page.get_by_role("button", name="Rename")
        await rename.focus()
        await page.keyboard.press("Enter")
        field = page.get_by_role("textbox", name="Conversation title")
        await expect(field).to_be_focused()
        await expect(field).to_have_value("Lisbon restaurants")
        await page.keyboard.type("Where to eat")
        await page.keyboard.press("Escape")
        await expect(page.locator("#chat-title")).to_have_text("Lisbon restaurants")
        await expect(rename).to_be_focused()
        await page.keyboard.press("Enter")
        await page.keyboard.type("  Where to eat in Lisbon ")
        await page.keyboard.press("Enter")
        await expect(page.locator("#chat-title")).to_have_text("Where to eat in Lisbon")
        await expect(page.locator("#conversations button.active")).to_have_text("Where to eat in Lisbon")
        await expect(rename).to_be_focused()
        cid = await page.locator("#conversations button.active").get_attribute("data-id")
        r = await stack.http.get(f"{stack.url}/conversations/{cid}", headers=stack.headers())
        assert r.json()["title"] == "Where to eat in Lisbon"

        # Delete, confirmed; a second page on the same conversation closes it too.
        other = await page.context.new_page()
        await _open(other, stack.page_url() + f"#c={cid}")
        await expect(other.locator("#chat-title")).to_have_text("Where to eat in Lisbon")
        questions: list[str] = []

        async def confirm(dialog: Dialog) -> None:
            questions.append(dialog.message)
            await dialog.accept()

        page.once("dialog", confirm)
        await page.get_by_role("button", name="Delete").focus()
        await page.keyboard.press("Enter")
        await expect(page.locator("#chat-title")).to_have_text("No conversation open")
        assert questions == ['Delete "Where to eat in Lisbon" and all its messages? This cannot be undone.']
        await expect(titles).to_have_text(["Trip to Lisbon", "Budget 2027"])
        await expect(page.locator("#banner-text")).to_have_text("The conversation was deleted.")
        await expect(page.locator("#new-conversation")).to_be_focused()
        await expect(page.locator("#content")).to_be_disabled()
        assert "#c=" not in page.url
        r = await stack.http.get(f"{stack.url}/conversations/{cid}", headers=stack.headers())
        assert r.status_code == 404

        await expect(other.locator("#chat-title")).to_have_text("No conversation open")
        await expect(other.locator("#banner-text")).to_have_text("The conversation was deleted.")
        await expect(other.locator("#conversations .conversation-title")).to_have_count(2)
        await other.close()

        # Dismissed: nothing is deleted.
        await page.locator("#conversations button", has_text="Budget 2027").click()
        page.once("dialog", lambda dialog: dialog.dismiss())
        await page.get_by_role("button", name="Delete").click()
        await expect(page.locator("#chat-title")).to_have_text("Budget 2027")
        await expect(titles).to_have_count(2)


async def test_another_users_conversation_does_not_open(page: Page, tmp_path) -> None:
    async with chat_stack(tmp_path) as stack:
        cid = await stack.conversation("Alice's plans")
        await stack.send(cid, "my secret plans")
        await stack.conversation("Bob's own", user="bob")

        # Bob follows a link to Alice's conversation.
        requests: list[tuple[str, int]] = []
        page.on("response", lambda response: requests.append((response.url, response.status)))
        await page.goto(stack.page_url("bob") + f"#c={cid}")
        await expect(page.locator("#banner-text")).to_have_text("This conversation does not exist or is not yours.")
        await expect(page.locator("#chat-title")).to_have_text("No conversation open")
        await expect(page.locator("#messages li")).to_have_count(0)
        await expect(page.locator("#content")).to_be_disabled()
        await expect(page.locator("#conversations .conversation-title")).to_have_text(["Bob's own"])
        assert (f"{stack.url}/conversations/{cid}", 404) in requests
        assert not any("/ws" in url for url, _ in requests)
        await expect(page.locator("body")).not_to_contain_text("my secret plans")
        await expect(page.locator("body")).not_to_contain_text("Alice's plans")
