"""The chat page across a restart of the ConversationService (a real process, SIGTERM): the server
closes the page's WebSocket with 1012, the page reconnects with ``after_seq`` once the service is
back, and shows what happened meanwhile, each message once."""

from __future__ import annotations

import json
from urllib.parse import quote

import httpx
import pytest
from playwright.async_api import Page, expect

from conversation_service.websocket.protocol import WS_SERVICE_RESTART
from tests.e2e.support import JWT_SECRET, assistant_after, screen_messages, token
from tests.support.servers import ServiceProcess, free_port

pytestmark = pytest.mark.browser

# Every close the page's sockets see, by code: the page's own handling is what is under test.
RECORD_CLOSES = """
window.__closeCodes = [];
const NativeWebSocket = window.WebSocket;
window.WebSocket = class extends NativeWebSocket {
  constructor(...args) {
    super(...args);
    this.addEventListener("close", (ev) => window.__closeCodes.push(ev.code));
  }
};
"""


async def test_the_page_reconnects_after_a_restart_and_catches_up(page: Page, tmp_path) -> None:
    port = free_port()
    env = {
        "CONVERSATION_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/chat.db", "AUTH_JWT_SECRET": JWT_SECRET,
        "MIGRATE_ON_START": "true", "REDIS_URL": "", "AGENT_SERVICE_API_KEY": "", "SHUTDOWN_GRACE_S": "5",
    }
    first, second = ServiceProcess("conversation_service", env, port=port), ServiceProcess("conversation_service", env, port=port)
    headers = {"Authorization": f"Bearer {token()}"}
    await first.start(tmp_path)
    try:
        async with httpx.AsyncClient(base_url=first.url, timeout=30, headers=headers) as http:
            r = await http.post("/conversations", json={"title": "restart"})
            assert r.status_code == 201, r.text
            cid = r.json()["id"]
            await page.add_init_script(RECORD_CLOSES)
            await page.goto(f"{first.url}/?token={quote(token())}")
            await expect(page.locator("#connection")).to_have_text("Live")
            await page.locator("#content").fill("hello")
            await page.locator("#send").click()
            await expect(assistant_after(page, "hello")).to_have_attribute("data-status", "complete")

            assert first.proc is not None
            first.proc.terminate()
            assert await first.wait_exit(10) == 0, first.logs()[-3000:]
            await expect(page.locator("#connection")).not_to_have_text("Live")
            assert WS_SERVICE_RESTART in await page.evaluate("window.__closeCodes")

            await second.start(tmp_path)
            # From another device while the page is reconnecting.
            r = await http.post(f"/conversations/{cid}/messages", json={"content": "how are you"})
            assert r.status_code == 202, r.text
            await expect(page.locator("#connection")).to_have_text("Live")
            await expect(assistant_after(page, "how are you")).to_have_attribute("data-status", "complete")

            server = (await http.get(f"/conversations/{cid}/messages?limit=200")).json()["items"]
            assert [[m["id"], m["role"], m["content"]] for m in server] == await screen_messages(page), json.dumps(server)
    finally:
        await first.stop(kill=True)
        await second.stop()
