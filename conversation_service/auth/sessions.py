"""The page's sessions after a sign-in at the identity provider (backend for the page).

The browser holds one cookie: 256 random bits, HttpOnly, Secure, SameSite=Lax. The server stores
its SHA-256 with who signed in and the provider's tokens, sealed with a key derived from the cookie
(``sealing``). The tokens are refreshed here, shortly before the access token expires; when the
provider refuses (the user signed out there, or was disabled) the session ends. One replica at a
time refreshes a session (``claim_refresh``), so a rotating refresh token is never used twice.

A cookie-authenticated request that changes something carries the session's CSRF token
(``X-CSRF-Token``, ``csrf_token``): another site can make the browser send the cookie, not read
the token.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import async_sessionmaker

from conversation_service.auth.login import LoginFlow, SignedIn
from conversation_service.auth.repository import WebSessionRepository
from conversation_service.auth.sealing import derive, lookup_id, new_secret, seal, tag, unseal
from conversation_service.auth.tokens import AuthenticatedUser
from conversation_service.db.models import WebSession
from conversation_service.errors import Unavailable
from conversation_service.settings.auth import WebSessionSettings
from shared.keyed_lock import KeyedLock
from shared.oidc.errors import InvalidToken, ProviderUnavailable, TokenRequestRefused
from shared.transactions import transaction

log = logging.getLogger(__name__)

_TOKENS_PURPOSE = "taskforce session tokens"
CSRF_HEADER = "X-CSRF-Token"
# How long one replica may hold a session's refresh; another waits for it at most this long.
REFRESH_HOLD_S = 15.0


def _now() -> datetime:
    return datetime.now(UTC)


def _user(row: WebSession) -> AuthenticatedUser:
    return AuthenticatedUser(
        user_id=row.user_id, org_id=row.org_id, permissions=tuple(row.permissions or ()),
        expires_at=row.access_expires_at.timestamp(), name=row.display_name,
    )


class WebSessions:
    def __init__(self, sessionmaker: async_sessionmaker, login: LoginFlow, settings: WebSessionSettings) -> None:
        self._sessionmaker = sessionmaker
        self.login = login
        self.settings = settings
        self._refreshing = KeyedLock()

    @property
    def cookie_name(self) -> str:
        # __Host-: the browser takes it only from this host, over https, for every path.
        return "__Host-taskforce_session" if self.settings.cookie_secure else "taskforce_session"

    @property
    def login_cookie_name(self) -> str:
        return "__Host-taskforce_login" if self.settings.cookie_secure else "taskforce_login"

    def csrf_token(self, secret: str) -> str:
        return tag(secret, "csrf")

    def csrf_valid(self, secret: str, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(self.csrf_token(secret).encode(), presented.encode())

    async def create(self, signed_in: SignedIn) -> str:
        """A new session for who signed in; the cookie's value."""
        secret = new_secret()
        now = _now()
        user = signed_in.user
        row = WebSession(
            id=lookup_id(secret), user_id=user.user_id, org_id=user.org_id, permissions=list(user.permissions),
            display_name=(user.name or user.user_id)[:200], sealed_tokens=self._seal(secret, signed_in.tokens),
            access_expires_at=datetime.fromtimestamp(signed_in.access_expires_at, UTC),
            expires_at=now + timedelta(seconds=self.settings.max_age_s), created_at=now,
        )
        async with transaction(self._sessionmaker) as session:
            await WebSessionRepository(session).add(row)
        return secret

    async def user(self, secret: str) -> AuthenticatedUser | None:
        """Who the cookie is signed in as, its tokens refreshed when due; None when it names no
        live session. ``Unavailable`` when the tokens are due, have expired and the provider is away."""
        if not secret or len(secret) > 128:
            return None
        row = await self._row(lookup_id(secret))
        if row is None:
            return None
        if row.access_expires_at - timedelta(seconds=self.settings.refresh_margin_s) > _now():
            return _user(row)
        async with self._refreshing(row.id):  # one refresh per session in this process
            return await self._refresh(secret, row.id)

    async def end(self, secret: str) -> dict[str, str] | None:
        """Sign out: the session is gone; its tokens (to revoke, and the ID token for the provider's logout)."""
        if not secret or len(secret) > 128:
            return None
        session_id = lookup_id(secret)
        async with transaction(self._sessionmaker) as session:
            repository = WebSessionRepository(session)
            row = await repository.get(session_id)
            if row is None:
                return None
            await repository.remove(session_id)
        return self._unseal(secret, row)

    async def remove_expired(self) -> int:
        async with transaction(self._sessionmaker) as session:
            return await WebSessionRepository(session).remove_expired(_now())

    async def _row(self, session_id: str) -> WebSession | None:
        async with transaction(self._sessionmaker) as session:
            row = await WebSessionRepository(session).get(session_id)
        if row is None or row.expires_at <= _now():
            return None
        return row

    async def _refresh(self, secret: str, session_id: str) -> AuthenticatedUser | None:
        row = await self._row(session_id)
        if row is None:
            return None
        now = _now()
        if row.access_expires_at - timedelta(seconds=self.settings.refresh_margin_s) > now:
            return _user(row)  # refreshed meanwhile
        async with transaction(self._sessionmaker) as session:
            claimed = await WebSessionRepository(session).claim_refresh(
                session_id, now, now + timedelta(seconds=REFRESH_HOLD_S))
        if not claimed:
            return await self._refreshed_elsewhere(row)
        tokens = self._unseal(secret, row)
        try:
            if not tokens or "refresh_token" not in tokens:
                raise TokenRequestRefused("no refresh token")
            fresh = await self.login.refresh(tokens["refresh_token"], tokens)
        except (TokenRequestRefused, InvalidToken) as exc:
            log.info("a session ended: the identity provider refused to refresh it", extra={"reason": str(exc)})
            await self._remove(session_id)
            return None
        except ProviderUnavailable:
            await self._release(session_id)
            if row.access_expires_at > now:
                return _user(row)  # not refreshed yet, still valid
            raise Unavailable("the identity provider cannot be reached to renew your session; try again shortly") \
                from None
        if fresh.user.user_id != row.user_id or fresh.user.org_id != row.org_id:
            log.warning("a session ended: its refreshed tokens name someone else")
            await self._remove(session_id)
            return None
        return await self._store(secret, session_id, fresh)

    async def _refreshed_elsewhere(self, row: WebSession) -> AuthenticatedUser | None:
        """Another replica refreshes this session: its tokens as they are while still valid, else
        the refreshed ones once they are stored."""
        if row.access_expires_at > _now():
            return _user(row)
        deadline = asyncio.get_running_loop().time() + REFRESH_HOLD_S
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
            current = await self._row(row.id)
            if current is None:
                return None
            if current.access_expires_at > _now():
                return _user(current)
        raise Unavailable("your session is being renewed; try again shortly")

    async def _store(self, secret: str, session_id: str, fresh: SignedIn) -> AuthenticatedUser:
        user = fresh.user
        expires = datetime.fromtimestamp(fresh.access_expires_at, UTC)
        async with transaction(self._sessionmaker) as session:
            await WebSessionRepository(session).store_refreshed(
                session_id, sealed_tokens=self._seal(secret, fresh.tokens), access_expires_at=expires,
                user_id=user.user_id, org_id=user.org_id, permissions=list(user.permissions),
            )
        return AuthenticatedUser(user_id=user.user_id, org_id=user.org_id, permissions=user.permissions,
                                 expires_at=fresh.access_expires_at, name=user.name)

    async def _remove(self, session_id: str) -> None:
        async with transaction(self._sessionmaker) as session:
            await WebSessionRepository(session).remove(session_id)

    async def _release(self, session_id: str) -> None:
        async with transaction(self._sessionmaker) as session:
            await WebSessionRepository(session).release_refresh(session_id)

    def _seal(self, secret: str, tokens: dict[str, str]) -> bytes:
        return seal(derive(secret, _TOKENS_PURPOSE), tokens, _TOKENS_PURPOSE)

    def _unseal(self, secret: str, row: WebSession) -> dict[str, str] | None:
        return unseal(derive(secret, _TOKENS_PURPOSE), row.sealed_tokens, _TOKENS_PURPOSE)
