"""Both services on loopback (SQLite) for the browser tests, and helpers to drive the chat page."""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from playwright.async_api import Locator, Page, WebSocketRoute

from agent_service.app import create_app as create_agent_app
from agent_service.settings import AgentServiceSettings
from conversation_service.app import create_app as create_chat_app
from conversation_service.auth.tokens import issue_token
from conversation_service.settings import ConversationSettings
from conversation_service.settings.a2a_agents import A2AAgentsSettings
from conversation_service.settings.delegation import DelegationSettings
from conversation_service.websocket.protocol import server_options
from shared.llm.builtin import BuiltinProvider
from tests.support.servers import free_port, serve_app

AGENT_KEY = "agent-key-for-browser-tests-0123456789"
JWT_SECRET = "browser-test-secret-for-the-chat-service-0123456789"
# Fast retries so failure paths finish quickly; the schedule itself is tested with the SDK.
FAST = {"agent_retry_delays_s": "0.01,0.02,0.04", "agent_reconnect_delays_s": "0.01,0.02,0.04"}


def token(user: str = "alice", org: str | None = "acme") -> str:
    return issue_token(JWT_SECRET, user, org, ttl_s=3600)


@dataclass
class ChatStack:
    url: str
    app: Any
    http: httpx.AsyncClient

    @property
    def state(self):
        return self.app.state

    def headers(self, user: str = "alice") -> dict[str, str]:
        return {"Authorization": f"Bearer {token(user)}"}

    def page_url(self, user: str = "alice") -> str:
        return f"{self.url}/?token={quote(token(user))}"

    async def conversation(self, title: str = "t", user: str = "alice") -> str:
        r = await self.http.post(
            f"{self.url}/conversations", json={"title": title}, headers=self.headers(user)
        )
        assert r.status_code == 201, r.text
        return r.json()["id"]

    async def send(self, conversation_id: str, content: str, user: str = "alice") -> dict:
        r = await self.http.post(
            f"{self.url}/conversations/{conversation_id}/messages",
            json={"content": content},
            headers=self.headers(user),
        )
        assert r.status_code == 202, r.text
        return r.json()

    async def messages(self, conversation_id: str, user: str = "alice") -> list[dict]:
        r = await self.http.get(
            f"{self.url}/conversations/{conversation_id}/messages?limit=200", headers=self.headers(user)
        )
        assert r.status_code == 200, r.text
        return r.json()["items"]

    async def agent_session(self, conversation_id: str, user: str = "alice") -> dict:
        r = await self.http.get(
            f"{self.url}/conversations/{conversation_id}/agent-session", headers=self.headers(user)
        )
        assert r.status_code == 200, r.text
        return r.json()

    async def answer(
        self, conversation_id: str, question_id: str, answer: str, user: str = "alice"
    ) -> httpx.Response:
        return await self.http.post(
            f"{self.url}/conversations/{conversation_id}/agent-answer",
            json={"question_id": question_id, "answer": answer},
            headers=self.headers(user),
        )


@asynccontextmanager
async def chat_stack(
    tmp_path: Path,
    *,
    profile: str = "default",
    delegation: dict | None = None,
    agent_chunk_delay: float = 0.005,
    agent_down: bool = False,
    agent_overrides: dict | None = None,
    a2a: A2AAgentsSettings | None = None,
    agent_provider: Any = None,
) -> AsyncIterator[ChatStack]:
    """The Agent Service and a ConversationService delegating to it, each with its SQLite file.

    ``agent_down``: the ConversationService points at a port nobody listens on. ``agent_overrides``:
    more Agent Service settings. ``a2a``: the A2A agents the chat may delegate to. ``agent_provider``:
    the Agent Service's model (the built-in one otherwise).
    """
    if agent_down:
        async with _chat_service(tmp_path, f"http://127.0.0.1:{free_port()}", profile, delegation, a2a) as stack:
            yield stack
        return
    agent_settings = AgentServiceSettings(
        database_url=f"sqlite+aiosqlite:///{tmp_path}/agent.db",
        api_keys=[AGENT_KEY],
        migrate_on_start=True,
        knowledge_dir=tmp_path / "no-docs",
        **(agent_overrides or {}),
    )
    # A small pause per chunk, so answers stream over several frames as they would from a model.
    agent_app = create_agent_app(
        agent_settings, provider=agent_provider or BuiltinProvider(first_token_delay=0, chunk_delay=agent_chunk_delay)
    )
    async with (
        serve_app(agent_app) as agent_url,
        _chat_service(tmp_path, agent_url, profile, delegation, a2a) as stack,
    ):
        yield stack


@asynccontextmanager
async def _chat_service(
    tmp_path: Path, agent_url: str, profile: str, delegation: dict | None, a2a: A2AAgentsSettings | None = None,
) -> AsyncIterator[ChatStack]:
    chat_settings = ConversationSettings(
        conversation_database_url=f"sqlite+aiosqlite:///{tmp_path}/chat.db",
        auth_jwt_secret=JWT_SECRET,
        migrate_on_start=True,
        redis_url=None,
        agent_service_url=agent_url,
        agent_service_api_key=AGENT_KEY,
        delegation=DelegationSettings(**{**FAST, "agent_profile_name": profile, **(delegation or {})}),
        a2a=a2a or A2AAgentsSettings(),
    )
    app = create_chat_app(chat_settings)
    async with serve_app(app, **server_options(chat_settings)) as url, httpx.AsyncClient(timeout=30) as http:
        yield ChatStack(url=url, app=app, http=http)


async def wait_until(
    check: Callable[[], bool | Awaitable[bool]], timeout: float = 15.0, what: str = "condition"
) -> None:
    """Poll a condition outside the page (the page side waits with Playwright's ``expect``)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


class SocketGate:
    """Sits between the page and the server's WebSocket, like a network that can fail.

    Open: frames pass both ways untouched. ``cut()`` drops the live connection; while shut, every
    reconnect attempt is refused at once (the page backs off and tries again). ``urls`` records
    each URL the page connected with, so a test can see the ``after_seq`` it resumed from.
    """

    def __init__(self) -> None:
        self.is_open = True
        self.urls: list[str] = []
        self.attempted_at: list[float] = []  # monotonic time of each connection attempt
        self.refused = 0
        self._live: list[tuple[WebSocketRoute, WebSocketRoute]] = []

    async def install(self, page: Page) -> None:
        await page.route_web_socket("**/ws*", self._route)

    async def _route(self, ws: WebSocketRoute) -> None:
        self.urls.append(ws.url)
        self.attempted_at.append(time.monotonic())
        if not self.is_open:
            self.refused += 1
            await ws.close(code=4000, reason="network down")
            return
        server = ws.connect_to_server()
        self._live.append((ws, server))

    async def cut(self) -> None:
        self.is_open = False
        live, self._live = self._live, []
        for page_side, server_side in live:
            await server_side.close()
            await page_side.close(code=4000, reason="network down")

    def restore(self) -> None:
        self.is_open = True


def assistant_after(page: Page, user_text: str) -> Locator:
    """The first assistant message after the user's message with exactly this text."""
    return page.locator(
        f"#messages li.msg.user:has(.body:text-is({json.dumps(user_text)})) ~ li.msg.assistant"
    ).first


async def screen_messages(page: Page) -> list[list[str]]:
    """[id, role, text] of every message on screen, top to bottom."""
    return await page.eval_on_selector_all(
        "#messages li.msg",
        "els => els.map(e => [e.dataset.messageId, e.dataset.role, e.querySelector('.body').textContent])",
    )
