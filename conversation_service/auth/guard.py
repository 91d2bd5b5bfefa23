"""Who makes a request: the one place that reads credentials off a request or a WebSocket handshake.

- ``Authorization: Bearer <token>``: an API client; checked by the configured ``BearerAuthenticator``.
- the session cookie (the page, signed in at the identity provider): the session's user. A request
  that changes something (POST, PUT, PATCH, DELETE) must also carry the session's CSRF token and,
  when the browser sends one, an allowed ``Origin`` (403 otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
from starlette.requests import HTTPConnection

from conversation_service.auth.authenticator import BearerAuthenticator
from conversation_service.auth.login import LoginFlow
from conversation_service.auth.sessions import CSRF_HEADER, WebSessions
from conversation_service.auth.tokens import AuthenticatedUser, bearer_from_header
from conversation_service.errors import Forbidden, Unauthorized
from shared.oidc.provider import IdentityProvider

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class SessionEnded(Unauthorized):
    """A session cookie that names no live session (signed out, expired, refused by the provider)."""

    def __init__(self) -> None:
        super().__init__("your session ended; sign in again")


def origin_allowed(origin: str | None, host: str | None, allowed: frozenset[str]) -> bool:
    if origin is None:
        return True  # not a browser: the credential is the whole check
    origin = origin.rstrip("/")
    if origin in allowed:
        return True
    # The chat page served by this service itself.
    return host is not None and urlsplit(origin).netloc == host


@dataclass(frozen=True, slots=True)
class Authentication:
    """The started authentication (``app.state.auth``): bearer tokens always; sessions, the page's
    login and the provider when signing in with the identity provider."""

    bearer: BearerAuthenticator
    allowed_origins: frozenset[str]
    provider: IdentityProvider | None = None
    # The provider's HTTP client (discovery, keys, token endpoint), one per process.
    http: httpx.AsyncClient | None = None
    login: LoginFlow | None = None
    sessions: WebSessions | None = None

    @property
    def mode(self) -> str:
        return "development" if self.provider is None else "oidc"

    def session_secret(self, conn: HTTPConnection) -> str | None:
        if self.sessions is None:
            return None
        return conn.cookies.get(self.sessions.cookie_name) or None

    async def bearer_user(self, conn: HTTPConnection) -> AuthenticatedUser | None:
        token = bearer_from_header(conn.headers.get("authorization"))
        return None if token is None else await self.bearer.authenticate(token)

    async def session_user(self, conn: HTTPConnection, secret: str) -> AuthenticatedUser:
        assert self.sessions is not None
        user = await self.sessions.user(secret)
        if user is None:
            raise SessionEnded()
        return user

    async def request_user(self, conn: HTTPConnection) -> AuthenticatedUser:
        """The caller of a REST request, or ``Unauthorized``."""
        user = await self.bearer_user(conn)
        if user is not None:
            return user
        secret = self.session_secret(conn)
        if secret is None:
            raise Unauthorized("missing bearer token")
        if conn.scope.get("method") in UNSAFE_METHODS:
            self._check_csrf(conn, secret)
        return await self.session_user(conn, secret)

    def _check_csrf(self, conn: HTTPConnection, secret: str) -> None:
        assert self.sessions is not None
        if not origin_allowed(conn.headers.get("origin"), conn.headers.get("host"), self.allowed_origins):
            raise Forbidden("this page's origin may not act for the session")
        if not self.sessions.csrf_valid(secret, conn.headers.get(CSRF_HEADER)):
            raise Forbidden(f"missing or wrong {CSRF_HEADER}: reload the page")
