"""A tool of an MCP server used end to end through the chat and the page: the approval card its
annotations ask for, the question its server asks mid-call as a question card, the tool's result
on the agent's message, and the answer. Against the SDK's test server over stdio."""

from __future__ import annotations

import sys

import pytest
from playwright.async_api import Page, expect

from tests.e2e.support import chat_stack
from tests.support.mcp_server import read_events
from tests.support.models import CommandModel
from tests.support.servers import REPO_ROOT

pytestmark = pytest.mark.browser

PROFILES = """
profiles:
  - name: ops
    system_prompt: You operate the team's systems with their tools.
    tools: []
    mcp:
      - server: ops
"""
REPLY_AFTER = "xpath=following-sibling::li[contains(concat(' ', @class, ' '), ' assistant ')][1]"


def _stack(tmp_path):
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(PROFILES)
    server = {"name": "ops", "command": sys.executable, "cwd": str(REPO_ROOT),
              "args": ["-m", "tests.support.mcp_server", "stdio", "--events", str(tmp_path / "events.jsonl")]}
    return chat_stack(tmp_path, profile="ops", agent_provider=CommandModel(),
                      agent_overrides={"profiles_file": profiles, "mcp_servers": [server]})


async def test_an_mcp_tool_asks_approval_then_its_server_asks_and_the_answer_comes(page: Page, tmp_path) -> None:
    async with _stack(tmp_path) as stack:
        await stack.conversation("deploys")
        await page.goto(stack.page_url())
        await expect(page.locator("#connection")).to_have_text("Live")

        await page.locator("#content").fill('/agent call ops_deploy {"service": "web"}')
        await page.locator("#send").click()
        approval = page.locator(".question-card[data-kind='approval']")
        await expect(approval).to_have_attribute("data-state", "open")
        await expect(approval.locator(".tool-name")).to_have_text("ops_deploy")
        await expect(approval.locator(".approval-args")).to_contain_text('"service": "web"')
        await approval.locator("button.approve").click()
        await expect(approval.locator(".card-decision")).to_have_text("Approved by you")

        question = page.locator(".question-card[data-kind='question'][data-state='open']")
        await expect(question).to_be_visible()
        # The question is the agent's message above its card.
        asking = page.locator("li.assistant").filter(has_text="deploy (MCP server ops) asks: Which environment")
        await expect(asking).to_have_count(1)
        await question.locator(".answer-input").fill("staging")
        await question.locator(".answer-send").click()
        answered = page.locator(".question-card[data-kind='question']")
        await expect(answered.locator(".card-decision")).to_have_text("You answered: staging")

        reply = answered.locator(REPLY_AFTER)
        await expect(reply).to_have_attribute("data-status", "complete")
        await expect(reply.locator("li.tool[data-tool='ops_deploy']")).to_have_attribute("data-state", "ok")
        await expect(reply.locator("li.tool[data-tool='ops_deploy'] .tool-result")).to_contain_text(
            "deployed web to staging")
        await expect(reply.locator(".body")).to_contain_text("deployed web to staging")
    deployed = [e for e in read_events(tmp_path / "events.jsonl") if e.get("tool") == "deploy"]
    assert [(e["service"], e["environment"]) for e in deployed] == [("web", "staging")]


async def test_a_read_only_mcp_tool_runs_at_once_and_its_result_shows(page: Page, tmp_path) -> None:
    async with _stack(tmp_path) as stack:
        await stack.conversation("weather")
        await page.goto(stack.page_url())
        await expect(page.locator("#connection")).to_have_text("Live")
        await page.locator("#content").fill('/agent call ops_weather {"city": "Lisbon"}')
        await page.locator("#send").click()
        reply = page.locator("li.assistant").last
        await expect(reply).to_have_attribute("data-status", "complete")
        tool = reply.locator("li.tool[data-tool='ops_weather']")
        await expect(tool).to_have_attribute("data-state", "ok")
        await expect(tool.locator(".tool-result")).to_contain_text("sunny")
        await expect(reply.locator(".body")).to_contain_text("Lisbon")
        await expect(page.locator(".question-card")).to_have_count(0)
