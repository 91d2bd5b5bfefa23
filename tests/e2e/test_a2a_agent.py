"""An answer of an A2A agent shows which agent gave it, live and after a reload: the page labels
the message with the agent's configured name (the reply's ``message.created`` frame carries it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from conversation_service.settings.a2a_agents import A2AAgentConfig, A2AAgentsSettings
from tests.e2e.support import assistant_after, chat_stack
from tests.e2e.test_page_product import open_chat, send
from tests.support.a2a_agent import A2ATestAgent
from tests.support.servers import free_port, serve_app

pytestmark = pytest.mark.browser


async def test_the_page_shows_which_a2a_agent_answers(page: Page, tmp_path: Path) -> None:
    port = free_port()
    agent = A2ATestAgent(f"http://127.0.0.1:{port}", name="Research Agent")
    settings = A2AAgentsSettings(agents=[A2AAgentConfig(name="research", card_url=agent.card_url)])
    async with serve_app(agent.app, port=port), chat_stack(tmp_path, agent_down=True, a2a=settings) as stack:
        await open_chat(page, stack, "A2A")
        await send(page, "/agent research what is new?")
        reply = assistant_after(page, "/agent research what is new?")
        await expect(reply).to_have_attribute("data-status", "complete")
        await expect(reply).to_have_attribute("data-agent", "research")
        await expect(reply.locator(".who")).to_have_text("Agent · research")
        await expect(reply.locator(".body")).to_have_text("Echo: what is new?")
        await page.reload()
        await expect(page.locator("#connection")).to_have_text("Live")
        again = assistant_after(page, "/agent research what is new?")
        await expect(again.locator(".who")).to_have_text("Agent · research")
