"""The chat page while the Agent Service dies mid-reply (SIGKILL, a real process restarted on its SQLite
file): the agent's run goes on from its last step, the reply completes in place, the page says that the
agent restarted a step, and the text it shows (live, and after a reload) is the stored reply, each
passage once. The Agent Service is ``tests.chaos.durable_agent`` (a scripted model paced like a real
one, two test tools); kills: while the model streams its first words, and while it streams the final
answer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from tests.chaos import durable_agent
from tests.e2e.support import AGENT_KEY, _chat_service, assistant_after
from tests.support.servers import ServiceProcess

pytestmark = pytest.mark.browser

MESSAGE = "/agent look the value up and send the note"


def _agent(tmp_path: Path) -> ServiceProcess:
    folder = tmp_path / "chaos"
    folder.mkdir()
    (folder / "profiles.yaml").write_text(durable_agent.PROFILES)
    return ServiceProcess("tests.chaos.durable_agent", {
        "AGENT_SERVICE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/agent.db", "AGENT_SERVICE_API_KEYS": AGENT_KEY,
        "AGENT_SERVICE_MIGRATE_ON_START": "true", "AGENT_SERVICE_LEASE_SECONDS": "1.0",
        "AGENT_SERVICE_LEASE_RENEW_SECONDS": "0.25", "AGENT_SERVICE_MEMORY_ENABLED": "false",
        "AGENT_SERVICE_PROFILES_FILE": str(folder / "profiles.yaml"), "CHAOS_DIR": str(folder),
        "CHUNK_S": "0.05", "BETWEEN_S": "0.3", "TOOL_S": "0.3",
    })


@pytest.mark.timeout(120)
async def test_the_reply_completes_in_place_when_the_agent_service_dies_mid_reply(page: Page, tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    await agent.start(tmp_path)
    expected = durable_agent.answer(note_known=True)
    delegation = {"agent_retry_delays_s": "0.2,0.5,1", "agent_reconnect_delays_s": "0.2,0.5,1,1,1,1,1,1,1,1"}
    try:
        async with _chat_service(tmp_path, agent.url, "default", delegation) as stack:
            cid = await stack.conversation("restart")
            await page.goto(stack.page_url() + f"#c={cid}")
            await expect(page.locator("#connection")).to_have_text("Live")
            await page.locator("#content").fill(MESSAGE)
            await page.locator("#send").click()
            reply = assistant_after(page, MESSAGE)
            body = reply.locator(".body")

            # While the model writes its first words (or runs the lookup right after them).
            await expect(body).to_contain_text("look that value")
            await agent.stop(kill=True)
            await agent.start(tmp_path)
            # While it writes the final answer, in the run continued by the restarted process.
            await expect(body).to_contain_text("Final05", timeout=30_000)
            await agent.stop(kill=True)
            await agent.start(tmp_path)

            await expect(reply).to_have_attribute("data-status", "complete", timeout=30_000)
            await expect(reply.locator(".restarted-text")).to_have_text("The agent restarted a step.")
            shown = _text(await body.text_content())
            assert shown == _text(expected)
            for passage in (durable_agent.PRE, durable_agent.MID, "Final05"):
                assert shown.count(_text(passage)) == 1, passage
            stored = [m for m in await stack.messages(cid) if m["role"] == "assistant"]
            assert [m["content"] for m in stored] == [expected] and stored[0]["status"] == "complete"

            await page.reload()
            reply = assistant_after(page, MESSAGE)
            await expect(reply).to_have_attribute("data-status", "complete")
            assert _text(await reply.locator(".body").text_content()) == _text(expected)
            await expect(reply.locator(".restarted-text")).to_be_visible()
    finally:
        await agent.stop()


def _text(text: str | None) -> str:
    return re.sub(r"\s+", " ", text or "").strip()
