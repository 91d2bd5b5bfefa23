"""The ConversationService signing in with the test OpenID Provider (``tests.support.oidc_provider``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from conversation_service.auth.settings import ChatOIDCSettings, WebSessionSettings
from conversation_service.settings import ConversationSettings
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
