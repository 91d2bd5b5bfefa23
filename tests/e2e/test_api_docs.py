"""Both services' /docs (Swagger UI) renders their operations in Chromium with every request to a
host other than 127.0.0.1 refused: the page needs nothing from the internet. ReDoc, whose bundle
fetches its logo from a CDN, is not served."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.async_api import Browser, Page, Route, expect

from agent_service.app import create_app as create_agent_app
from agent_service.settings import AgentServiceSettings
from conversation_service.app import create_app as create_chat_app
from conversation_service.settings import ConversationSettings
from shared.llm.builtin import BuiltinProvider
from tests.support.servers import serve_app

pytestmark = pytest.mark.browser


def _agent_app(tmp_path: Path) -> Any:
    settings = AgentServiceSettings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'agent.db'}", api_keys=["docs-test-key"], migrate_on_start=True,
    )
    return create_agent_app(settings, provider=BuiltinProvider(first_token_delay=0, chunk_delay=0))


def _chat_app(tmp_path: Path) -> Any:
    return create_chat_app(ConversationSettings(
        conversation_database_url=f"sqlite+aiosqlite:///{tmp_path / 'chat.db'}", migrate_on_start=True,
        auth_jwt_secret="docs-test-secret-for-the-chat-service-0123456789", redis_url=None,
    ))


SERVICES: dict[str, tuple[Callable[[Path], Any], str]] = {
    "agent_service": (_agent_app, "/api/v1/agent/execute"),
    "conversation_service": (_chat_app, "/conversations/{conversation_id}/messages"),
}


@asynccontextmanager
async def offline_page(browser: Browser) -> AsyncIterator[tuple[Page, list[str]]]:
    """A page whose requests to any host but 127.0.0.1 are aborted (and listed)."""
    context = await browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(15_000)
    refused: list[str] = []

    async def only_loopback(route: Route) -> None:
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            await route.continue_()
        else:
            refused.append(route.request.url)
            await route.abort("internetdisconnected")

    await context.route("**/*", only_loopback)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page, refused
    finally:
        await context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.mark.parametrize("service", SERVICES)
async def test_swagger_ui_renders_the_operations_offline(browser: Browser, tmp_path: Path, service: str) -> None:
    make_app, path = SERVICES[service]
    app = make_app(tmp_path)
    operations = sum(len(methods) for methods in app.openapi()["paths"].values())
    async with serve_app(app) as url, offline_page(browser) as (page, refused):
        await page.goto(f"{url}/docs")
        await expect(page.locator(".opblock")).to_have_count(operations)
        await expect(page.locator(f'.opblock-summary-path[data-path="{path}"]').first).to_be_visible()
        assert await page.evaluate("typeof SwaggerUIBundle") == "function"
        assert (await page.request.get(f"{url}/redoc")).status == 404
    assert refused == []

