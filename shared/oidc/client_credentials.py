"""A service's own access token (OAuth 2.0 client credentials), as an ``httpx.Auth``.

The token is fetched once and sent with every request until shortly before it expires (one fetch
however many requests want it at once). An answer 401 drops it: the request is sent once more
with a fresh one. When no token can be had, the request fails as a connection failure would
(``httpx.ConnectError``), so the caller's retries and fallbacks apply.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Callable, Generator

import httpx

from shared.oidc.errors import OIDCError
from shared.oidc.token_endpoint import TokenEndpoint

log = logging.getLogger(__name__)
# Renewed this long before it expires, so a request does not leave with a token that dies on the way.
RENEW_MARGIN_S = 30.0


class ClientCredentialsAuth(httpx.Auth):
    requires_response_body = False

    def __init__(self, endpoint: TokenEndpoint, params: dict[str, str] | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self._endpoint = endpoint
        self._form = {"grant_type": "client_credentials", **(params or {})}
        self._clock = clock
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = asyncio.Lock()

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        raise RuntimeError("ClientCredentialsAuth works with httpx.AsyncClient only")

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        token = await self._current(request)
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:
            self._drop(token)
            request.headers["Authorization"] = f"Bearer {await self._current(request)}"
            yield request

    async def token(self) -> str:
        """The current token, fetched when there is none or it is about to expire."""
        if self._token is not None and self._clock() < self._expires_at - RENEW_MARGIN_S:
            return self._token
        async with self._lock:  # one fetch for everyone waiting
            if self._token is not None and self._clock() < self._expires_at - RENEW_MARGIN_S:
                return self._token
            started = self._clock()
            body = await self._endpoint.grant(self._form)
            expires_in = body.get("expires_in")
            lifetime = float(expires_in) if isinstance(expires_in, int | float) and expires_in > 0 else 300.0
            self._token, self._expires_at = body["access_token"], started + lifetime
            return self._token

    async def _current(self, request: httpx.Request) -> str:
        try:
            return await self.token()
        except OIDCError as exc:
            log.error("no access token for the outgoing request", extra={"reason": str(exc)})
            raise httpx.ConnectError(f"no access token: {exc}", request=request) from None

    def _drop(self, token: str) -> None:
        if self._token == token:
            self._token = None
