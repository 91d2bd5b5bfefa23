"""Chromium (Debian's package, never a downloaded browser) driven by Playwright's async API in the
suite's event loop. One browser per session, a fresh context per test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
async def browser() -> Browser:
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"Chromium is required for the browser tests: install it (apt-get install -y chromium), "
            f"or set CHROMIUM_PATH; {CHROMIUM} does not exist"
        )
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture
async def page(browser: Browser) -> Page:
    """A page in its own context; a JavaScript error on the page fails the test."""
    context = await browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(15_000)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page
    finally:
        await context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"
