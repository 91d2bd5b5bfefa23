"""Who a chat WebSocket acts for, from the handshake to its close.

The handshake takes, in this order: ``Authorization: Bearer`` (API clients), the page's session
cookie (with the ``Origin`` allowlist the router checks first), or a first frame
``{"type": "auth", "token": ...}`` within the auth timeout.

A credential expires; the socket does not outlive it (``SocketCredential.watch``):

- a session cookie's socket is renewed by the session itself (its tokens are refreshed on the
  server), and checks it every ``AUTH_SESSION_SOCKET_RECHECK_S``; when the session has ended (signed
  out on any replica, refused by the provider) the socket is closed 1008 ``session ended``;
- a token's socket is told ``{"type": "auth.expiring", "data": {"expires_at": ...}}`` shortly
  before, and may send ``{"type": "auth", "token": ...}`` again at any time (a token of the same
  user and organisation; answered ``auth.ok`` with the new expiry). Otherwise it is closed 1008
  ``token expired`` when the token expires.

Every authentication failure closes with 1008 (policy violation); a provider that cannot be asked
closes with 1013 (try again later).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from fastapi import WebSocket
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from conversation_service.auth.guard import Authentication
from conversation_service.auth.tokens import AuthenticatedUser
from conversation_service.errors import WS_POLICY_VIOLATION, WS_TRY_AGAIN_LATER, Unauthorized, Unavailable

# A token's socket is told this long before its token expires, to send a new one.
EXPIRY_NOTICE_S = 30.0
SESSION_ENDED = "session ended"
TOKEN_EXPIRED = "token expired"


class AuthFrame(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str
    token: str = Field(max_length=16_384)


class Refused(Exception):
    """The handshake failed: the reason is counted and, once accepted, the client is told."""

    def __init__(self, reason: str, text: str = "", code: int = WS_POLICY_VIOLATION) -> None:
        super().__init__(text)
        self.reason = reason
        self.text = text
        self.code = code


class CloseRequest(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def parse_auth_frame(raw: str) -> str:
    """The token of an auth frame, or ``Unauthorized``."""
    if len(raw) > 20_000:
        raise Unauthorized("auth frame too large")
    try:
        frame = AuthFrame.model_validate(orjson.loads(raw))
    except (orjson.JSONDecodeError, ValidationError):
        raise Unauthorized("the first frame must be {\"type\": \"auth\", \"token\": ...}") from None
    if frame.type != "auth":
        raise Unauthorized("the first frame must be an auth frame")
    return frame.token


async def handshake_user(websocket: WebSocket, auth: Authentication) -> tuple[AuthenticatedUser | None, str | None]:
    """The user of a header token or of the session cookie (and the cookie), before the handshake
    completes; (None, None) when the client is to authenticate with a first frame."""
    try:
        user = await auth.bearer_user(websocket)
    except Unauthorized:
        raise Refused("auth") from None
    except Unavailable:
        raise Refused("provider_unavailable", code=WS_TRY_AGAIN_LATER) from None
    if user is not None:
        return user, None
    secret = auth.session_secret(websocket)
    if secret is None or auth.sessions is None:
        return None, None
    try:
        user = await auth.sessions.user(secret)
    except Unavailable:
        raise Refused("provider_unavailable", "identity provider unavailable", WS_TRY_AGAIN_LATER) from None
    if user is None:
        raise Refused("session_ended", SESSION_ENDED)
    return user, secret


async def first_frame_user(websocket: WebSocket, auth: Authentication, timeout_s: float) -> AuthenticatedUser:
    try:
        raw = await asyncio.wait_for(websocket.receive_text(), timeout=timeout_s)
    except TimeoutError:
        raise Refused("auth_timeout", "authentication timeout") from None
    try:
        return await auth.bearer.authenticate(parse_auth_frame(raw))
    except Unauthorized:
        raise Refused("auth", "authentication failed") from None
    except Unavailable:
        raise Refused("provider_unavailable", "identity provider unavailable", WS_TRY_AGAIN_LATER) from None


class SocketCredential:
    """The user a socket acts for, until its credential expires (see the module docstring)."""

    def __init__(self, user: AuthenticatedUser, auth: Authentication, session_secret: str | None) -> None:
        self.user = user
        self._auth = auth
        self._secret = session_secret
        self._renewed = asyncio.Event()
        self._noticed = False

    async def renew(self, token: str) -> dict[str, Any]:
        """A new token sent in band: the ``auth.ok`` answer, or ``CloseRequest``."""
        try:
            user = await self._auth.bearer.authenticate(token)
        except Unauthorized:
            raise CloseRequest(WS_POLICY_VIOLATION, "authentication failed") from None
        except Unavailable:
            raise CloseRequest(WS_TRY_AGAIN_LATER, "identity provider unavailable") from None
        if not user.same_identity(self.user):
            raise CloseRequest(WS_POLICY_VIOLATION, "the token is another user's")
        self.user, self._noticed = user, False
        self._renewed.set()
        return {"type": "auth.ok", "data": {"expires_at": user.expires_at}}

    async def watch(self, notify: Any) -> None:
        """Runs while the socket is open; raises ``CloseRequest`` when the credential has expired.
        ``notify(frame)`` sends a control frame to the client."""
        while True:
            expires_at = self.user.expires_at
            if expires_at is None:
                await self._wait(None)
                continue
            now = time.time()
            if self._secret is not None and self._auth.sessions is not None:
                recheck = self._auth.sessions.settings.socket_recheck_s
                await self._wait(max(0.0, min(expires_at - now, recheck)))
                await self._recheck_session()
                continue
            if not self._noticed:
                if expires_at - EXPIRY_NOTICE_S > now:
                    await self._wait(expires_at - EXPIRY_NOTICE_S - now)
                    continue
                self._noticed = True
                notify({"type": "auth.expiring", "data": {"expires_at": expires_at}})
            if expires_at > now:
                await self._wait(expires_at - now)
                continue
            raise CloseRequest(WS_POLICY_VIOLATION, TOKEN_EXPIRED)

    async def _recheck_session(self) -> None:
        assert self._secret is not None and self._auth.sessions is not None
        try:
            user = await self._auth.sessions.user(self._secret)  # refreshed by the session when due
        except Unavailable:
            raise CloseRequest(WS_TRY_AGAIN_LATER, "identity provider unavailable") from None
        if user is None:
            raise CloseRequest(WS_POLICY_VIOLATION, SESSION_ENDED)
        if user.expires_at is not None and user.expires_at <= time.time():
            raise CloseRequest(WS_POLICY_VIOLATION, SESSION_ENDED)
        self.user = user

    async def _wait(self, timeout: float | None) -> None:
        try:
            await asyncio.wait_for(self._renewed.wait(), timeout=timeout)
        except TimeoutError:
            return
        self._renewed.clear()
