"""The chat page signing in at a real OpenID Provider (oidc-provider on loopback), in Chromium:
sent to the provider's sign-in, back signed in, chat, reload, a draft kept across a sign-in again,
sign out here and at the provider. The session cookie is HttpOnly and the page's JavaScript can read
no token."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from playwright.async_api import Page, expect

from conversation_service.app import create_app
from conversation_service.websocket.protocol import server_options
from tests.integration.conversation_service.auth.support import chat_settings
from tests.support.oidc_provider import OpenIDProvider, ProviderConfig, running_provider
from tests.support.servers import free_port, serve_app

JWT = re.compile(r"eyJ[\w-]+\.eyJ[\w-]+\.[\w-]+")


@asynccontextmanager
async def signed_in_chat(tmp_path) -> AsyncIterator[tuple[str, OpenIDProvider]]:
    port = free_port()
    chat = f"http://127.0.0.1:{port}"
    async with running_provider(tmp_path, ProviderConfig(chat_url=chat)) as provider:
        settings = chat_settings(tmp_path, provider, login=True)
        async with serve_app(create_app(settings), port=port, **server_options(settings)):
            yield chat, provider


async def sign_in_at_the_provider(page: Page, provider: OpenIDProvider, user: str = "alice") -> None:
    await expect(page).to_have_url(re.compile(re.escape(provider.issuer) + "/interaction/"))
    await page.get_by_label("User name").fill(user)
    await page.get_by_label("Password").fill(provider.config.users[user]["password"])
    await page.get_by_role("button", name="Sign in").click()


async def no_token_in_reach_of_the_page(page: Page) -> None:
    """What the page's JavaScript can read: cookies, storage, what its own requests get back."""
    readable = await page.evaluate("""async () => JSON.stringify({
        cookie: document.cookie,
        local: {...localStorage},
        session: {...sessionStorage},
        info: await (await fetch('/auth/session')).text(),
        html: document.documentElement.outerHTML,
    })""")
    assert "taskforce_session" not in readable
    assert not JWT.search(readable), "a token is readable by the page's JavaScript"


async def test_sign_in_chat_reload_and_sign_out(page: Page, tmp_path) -> None:
    async with signed_in_chat(tmp_path) as (chat, provider):
        await page.goto(chat + "/")
        await sign_in_at_the_provider(page, provider)
        await expect(page.locator("#who")).to_have_text("Alice Liddell")
        await expect(page.locator("#log-out")).to_be_visible()
        await expect(page.locator("#sign-out")).to_be_hidden()  # no "Change token"
        await expect(page.locator("#token-form")).to_be_hidden()

        await page.locator("#new-conversation").click()
        await page.locator("#content").fill("hello there")
        await page.locator("#send").click()
        reply = page.locator("#messages li.msg.assistant .body").first
        await expect(reply).not_to_be_empty(timeout=15_000)
        await expect(page.locator("#connection")).to_have_text("Live")

        cookies = {c["name"]: c for c in await page.context.cookies(chat)}
        session = cookies["__Host-taskforce_session"]
        assert session["httpOnly"] and session["secure"] and session["sameSite"] == "Lax"
        await no_token_in_reach_of_the_page(page)

        await page.reload()
        await expect(page.locator("#who")).to_have_text("Alice Liddell")
        await expect(page.locator("#messages li.msg.user .body")).to_have_text(["hello there"])
        await expect(page.locator("#connection")).to_have_text("Live")

        await page.locator("#log-out").click()
        # The provider asks whether to sign out there too.
        await page.get_by_role("button", name="Yes, sign me out").click()
        await expect(page).to_have_url(chat + "/")
        await expect(page.locator("#banner")).to_contain_text("You signed out")
        await expect(page.locator("#sign-in")).to_be_visible()
        assert "__Host-taskforce_session" not in {c["name"] for c in await page.context.cookies(chat)}
        # Signed out at the provider as well: signing in again asks for the password.
        await page.locator("#sign-in").click()
        await sign_in_at_the_provider(page, provider, "bob")
        await expect(page.locator("#who")).to_have_text("Bob Builder")
        await expect(page.locator("#conversations button")).to_have_count(0)  # alice's are not his


async def test_a_draft_survives_signing_in_again(page: Page, tmp_path) -> None:
    async with signed_in_chat(tmp_path) as (chat, provider):
        await page.goto(chat + "/")
        await sign_in_at_the_provider(page, provider)
        await page.locator("#new-conversation").click()
        await expect(page.locator("#content")).to_be_enabled()
        conversation_url = page.url
        await page.locator("#content").fill("a long thought, not sent yet")
        # The session ends on the server's side (as when it expires, or is signed out elsewhere).
        await page.context.clear_cookies()
        await page.locator("#send").click()
        await expect(page.locator("#banner")).to_contain_text("Your session ended")
        await expect(page.locator("#content")).to_have_value("a long thought, not sent yet")
        await page.locator("#sign-in").click()
        await sign_in_at_the_provider(page, provider)
        await expect(page).to_have_url(conversation_url)
        await expect(page.locator("#content")).to_have_value("a long thought, not sent yet")
        await page.locator("#send").click()
        await expect(page.locator("#messages li.msg.user .body")).to_have_text(["a long thought, not sent yet"])
        await expect(page.locator("#content")).to_have_value("")
