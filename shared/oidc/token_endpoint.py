"""The provider's token endpoint, called as a confidential client (``client_secret_basic``)."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote_plus

import httpx
import orjson

from shared.oidc.errors import ProviderUnavailable, TokenRequestRefused
from shared.oidc.provider import MAX_DOCUMENT_BYTES, IdentityProvider


def basic_credentials(client_id: str, secret: str) -> str:
    # RFC 6749 2.3.1: both form-urlencoded before they are joined and base64-encoded.
    raw = f"{quote_plus(client_id)}:{quote_plus(secret)}".encode()
    return "Basic " + base64.b64encode(raw).decode()


class TokenEndpoint:
    def __init__(self, provider: IdentityProvider, http: httpx.AsyncClient, client_id: str, client_secret: str, *,
                 timeout_s: float) -> None:
        if not client_id or not client_secret:
            raise ValueError("a confidential client needs its id and secret")
        self.provider = provider
        self.client_id = client_id
        self._authorization = basic_credentials(client_id, client_secret)
        self._http = http
        self._timeout_s = timeout_s

    async def grant(self, form: dict[str, str]) -> dict[str, Any]:
        """The token response of one grant; ``TokenRequestRefused`` when the provider says no,
        ``ProviderUnavailable`` when it cannot be asked."""
        metadata = await self.provider.metadata()
        if not metadata.token_endpoint:
            raise ProviderUnavailable("the identity provider has no token endpoint")
        try:
            response = await self._http.post(
                metadata.token_endpoint, data=form, timeout=self._timeout_s,
                headers={"Authorization": self._authorization, "Accept": "application/json"},
            )
        except httpx.HTTPError as exc:
            raise ProviderUnavailable(f"the token endpoint could not be reached ({type(exc).__name__})") from None
        if len(response.content) > MAX_DOCUMENT_BYTES:
            raise ProviderUnavailable("the token endpoint's answer is too large")
        try:
            body = orjson.loads(response.content) if response.content else {}
        except orjson.JSONDecodeError:
            body = {}
        if response.status_code in (400, 401) and isinstance(body, dict) and isinstance(body.get("error"), str):
            raise TokenRequestRefused(body["error"][:100])
        if response.status_code != 200 or not isinstance(body, dict) or not isinstance(body.get("access_token"), str):
            raise ProviderUnavailable(f"the token endpoint answered {response.status_code}")
        return body

    async def revoke(self, token: str, hint: str) -> bool:
        """Revoke a token where the provider supports it (RFC 7009); whether it was asked."""
        metadata = await self.provider.metadata()
        if not metadata.revocation_endpoint:
            return False
        try:
            response = await self._http.post(
                metadata.revocation_endpoint, data={"token": token, "token_type_hint": hint},
                timeout=self._timeout_s, headers={"Authorization": self._authorization},
            )
        except httpx.HTTPError:
            return False
        return response.status_code == 200
