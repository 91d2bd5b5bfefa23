"""The ConversationService signing in with the test OpenID Provider (``tests.support.oidc_provider``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from http.cookies import Morsel, SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from conversation_service.settings import ConversationSettings
from conversation_service.settings.auth import ChatOIDCSettings, WebSessionSettings
from tests.integration.conversation_service.support import make_settings, running
from tests.support.oidc_provider import (
    CHAT_AUDIENCE,
    CHAT_CLIENT,
    ORG_CLAIM,
    PERMISSIONS_CLAIM,
    OpenIDProvider,
)


def oidc_settings(provider: OpenIDProvider | str, *, login: bool = False, **overrides: Any) -> ChatOIDCSettings:
    issuer = provider if isinstance(provider, str) else provider.issuer
    values: dict[str, Any] = {
        "issuer": issuer, "audience": CHAT_AUDIENCE, "org_claim": ORG_CLAIM, "permissions_claim": PERMISSIONS_CLAIM,
        "leeway_s": 5.0,
    }
    if login:
        values.update(client_id=CHAT_CLIENT.client_id, client_secret=CHAT_CLIENT.secret,
                      scopes="openid profile email offline_access chat")
    return ChatOIDCSettings(**{**values, **overrides})


def chat_settings(tmp_path: Path, provider: OpenIDProvider | str, *, login: bool = False,
                  session: dict[str, Any] | None = None, **oidc: Any) -> ConversationSettings:
    return make_settings(
        f"sqlite+aiosqlite:///{tmp_path}/chat.db", oidc=oidc_settings(provider, login=login, **oidc),
        session=WebSessionSettings(**(session or {})),
    )


@asynccontextmanager
async def chat_with_provider(tmp_path: Path, provider: OpenIDProvider | str, **options: Any
                             ) -> AsyncIterator[tuple[str, Any]]:
    async with running(chat_settings(tmp_path, provider, **options)) as (url, app):
        yield url, app


class PageBrowser:
    """What a browser does with the chat's sign-in, without a browser: follows the redirects between
    the chat and the provider, signs in on the provider's page, keeps the chat's cookies (whatever
    their Secure flag: everything is on loopback) and the provider's in a jar of its own."""

    def __init__(self, chat: str, provider: OpenIDProvider) -> None:
        self.chat = chat
        self.provider = provider
        self.cookies: dict[str, Morsel] = {}
        self.http = httpx.AsyncClient(follow_redirects=False, timeout=15)
        self.op = httpx.AsyncClient(follow_redirects=False, timeout=15)

    async def aclose(self) -> None:
        await self.http.aclose()
        await self.op.aclose()

    def cookie_header(self) -> dict[str, str]:
        return {"Cookie": "; ".join(f"{name}={m.value}" for name, m in self.cookies.items())} if self.cookies else {}

    def _keep(self, response: httpx.Response) -> None:
        for header in response.headers.get_list("set-cookie"):
            jar: SimpleCookie = SimpleCookie()
            jar.load(header)
            for name, morsel in jar.items():
                if morsel["max-age"] == "0" or not morsel.value:
                    self.cookies.pop(name, None)
                else:
                    self.cookies[name] = morsel

    async def chat_request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {**self.cookie_header(), **kwargs.pop("headers", {})}
        response = await self.http.request(method, self.chat + path, headers=headers, **kwargs)
        self._keep(response)
        return response

    async def sign_in(self, user: str = "alice", return_to: str | None = None) -> httpx.Response:
        """From /auth/login to the chat's answer to the provider's redirect back (returned)."""
        password = self.provider.config.users[user]["password"]
        response = await self.chat_request("GET", "/auth/login", params={"return_to": return_to} if return_to else None)
        assert response.status_code == 302, response.text
        location = response.headers["location"]
        for _ in range(8):
            location = str(httpx.URL(self.provider.issuer).join(location))
            if location.startswith(self.chat):
                return await self.chat_request("GET", location.removeprefix(self.chat))
            path = urlsplit(location).path
            if path.startswith("/interaction/") and not path.endswith("/login"):
                page = await self.op.get(location)
                assert "Sign in" in page.text
                response = await self.op.post(f"{self.provider.issuer}{path}/login",
                                              data={"username": user, "password": password})
            else:
                response = await self.op.get(location)
            location = str(response.request.url.join(response.headers["location"]))
        raise AssertionError("the sign-in did not come back to the chat")

    async def session(self) -> dict[str, Any]:
        response = await self.chat_request("GET", "/auth/session")
        assert response.status_code == 200, response.text
        return response.json()
