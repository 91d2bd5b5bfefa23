"""The page's sign-in at the identity provider: authorization code with PKCE (S256), the
ConversationService being a confidential client (a backend for the page: the provider's tokens
never reach the browser).

``begin`` makes the authorization request and the sealed cookie that remembers it (state, PKCE
verifier, nonce, where to go back to); ``finish`` checks the provider's answer against it (state,
``iss`` when sent: RFC 9207), redeems the code, checks the ID token (signature, issuer, audience =
our client id, nonce) and the access token (as any API call's), and says who signed in.
``refresh`` and ``end_session_url`` serve the session later.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from conversation_service.auth.authenticator import user_of
from conversation_service.auth.sealing import derive, seal_text, unseal_text
from conversation_service.auth.tokens import AuthenticatedUser
from conversation_service.settings.auth import ChatOIDCSettings
from shared.oidc.errors import InvalidToken, OIDCError, ProviderUnavailable
from shared.oidc.token_endpoint import TokenEndpoint
from shared.oidc.verifier import AccessTokenVerifier, claim

_LOGIN_PURPOSE = "taskforce sign-in under way"
MAX_RETURN_TO = 2000


class SignInFailed(Exception):
    """The sign-in did not complete; ``code`` is what the page is told (never a secret)."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@dataclass(frozen=True, slots=True)
class SignedIn:
    user: AuthenticatedUser
    tokens: dict[str, str]
    access_expires_at: float


def safe_return_to(value: str | None) -> str:
    """A path on this site to go back to after the sign-in; anything else (another site) is "/"."""
    if not value or len(value) > MAX_RETURN_TO or not value.startswith("/") or value.startswith("//"):
        return "/"
    if "\\" in value or any(ord(c) < 0x20 for c in value) or urlsplit(value).netloc:
        return "/"
    return value


def _challenge(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


class LoginFlow:
    def __init__(self, settings: ChatOIDCSettings, verifier: AccessTokenVerifier, endpoint: TokenEndpoint, *,
                 login_timeout_s: float) -> None:
        self._settings = settings
        self._verifier = verifier
        self._endpoint = endpoint
        self._login_timeout_s = login_timeout_s
        self._cookie_key = derive(settings.client_secret.get_secret_value(), _LOGIN_PURPOSE)
        self._extra = dict(parse_qsl(settings.authorize_params, keep_blank_values=False))

    @property
    def provider(self):
        return self._verifier.provider

    async def begin(self, return_to: str | None, redirect_uri: str) -> tuple[str, str]:
        """The provider's authorization URL, and the sealed cookie the callback needs."""
        metadata = await self.provider.metadata()
        if not metadata.authorization_endpoint:
            raise ProviderUnavailable("the identity provider has no authorization endpoint")
        if metadata.code_challenge_methods and "S256" not in metadata.code_challenge_methods:
            raise ProviderUnavailable("the identity provider does not support PKCE with S256")
        pending = {"state": secrets.token_urlsafe(24), "verifier": secrets.token_urlsafe(48),
                   "nonce": secrets.token_urlsafe(24), "return_to": safe_return_to(return_to),
                   "redirect_uri": redirect_uri, "at": time.time()}
        query = {
            **self._extra, "response_type": "code", "client_id": self._settings.client_id,
            "redirect_uri": redirect_uri, "scope": self._settings.scopes, "state": pending["state"],
            "nonce": pending["nonce"], "code_challenge": _challenge(pending["verifier"]),
            "code_challenge_method": "S256",
        }
        separator = "&" if urlsplit(metadata.authorization_endpoint).query else "?"
        return (metadata.authorization_endpoint + separator + urlencode(query),
                seal_text(self._cookie_key, pending, _LOGIN_PURPOSE))

    async def finish(self, params: dict[str, str], cookie: str | None) -> tuple[SignedIn, str]:
        """Who signed in, and where the page goes back to; ``SignInFailed`` otherwise."""
        pending = unseal_text(self._cookie_key, cookie or "", _LOGIN_PURPOSE)
        if pending is None or time.time() - float(pending.get("at", 0)) > self._login_timeout_s:
            raise SignInFailed("expired")
        if not hmac.compare_digest(str(pending["state"]).encode(), params.get("state", "").encode()):
            raise SignInFailed("state")
        if "iss" in params and params["iss"] != self.provider.issuer:
            raise SignInFailed("issuer")
        if "error" in params:
            raise SignInFailed("denied" if params["error"] == "access_denied" else "provider")
        code = params.get("code")
        if not code or len(code) > 4096:
            raise SignInFailed("provider")
        try:
            tokens = await self._endpoint.grant({
                "grant_type": "authorization_code", "code": code, "redirect_uri": pending["redirect_uri"],
                "code_verifier": pending["verifier"],
            })
            signed_in = await self._signed_in(tokens, nonce=pending["nonce"])
        except ProviderUnavailable:
            raise SignInFailed("unavailable") from None
        except OIDCError:
            raise SignInFailed("tokens") from None
        return signed_in, pending["return_to"]

    async def refresh(self, refresh_token: str, previous: dict[str, str]) -> SignedIn:
        """New tokens for a session (``TokenRequestRefused`` when the provider ended the grant)."""
        tokens = await self._endpoint.grant({"grant_type": "refresh_token", "refresh_token": refresh_token})
        # A provider that does not rotate refresh tokens (or sends no new ID token) keeps the old ones.
        merged = {**previous, **{k: v for k, v in tokens.items() if isinstance(v, str)}}
        return await self._signed_in(merged, nonce=None, name=previous.get("name"))

    async def _signed_in(self, tokens: dict[str, Any], *, nonce: str | None, name: str | None = None) -> SignedIn:
        access = await self._verifier.verify(tokens["access_token"])
        if nonce is not None:
            id_token = tokens.get("id_token")
            if not isinstance(id_token, str):
                raise InvalidToken("the provider sent no ID token", "id_token")
            identity = await self._verifier.verify_id_token(id_token, audience=self._settings.client_id)
            if not hmac.compare_digest(str(identity.claims.get("nonce", "")).encode(), nonce.encode()):
                raise InvalidToken("the ID token's nonce does not match", "nonce")
            name = self._display_name(identity.claims) or access.subject
        kept = {k: tokens[k] for k in ("access_token", "refresh_token", "id_token") if isinstance(tokens.get(k), str)}
        kept["name"] = name or access.subject
        user = user_of(access, leeway_s=0.0, name=kept["name"])
        return SignedIn(user=user, tokens=kept, access_expires_at=access.expires_at)

    def _display_name(self, claims: dict[str, Any]) -> str | None:
        for name in (self._settings.name_claim, "preferred_username"):
            value = claim(claims, name)
            if isinstance(value, str) and value.strip() and value.isprintable():
                return value.strip()[:200]
        return None

    async def end_session_url(self, id_token: str | None, post_logout_redirect_uri: str) -> str | None:
        """Where the browser signs out at the provider too (RP-initiated logout), when it can."""
        try:
            metadata = await self.provider.metadata()
        except ProviderUnavailable:
            return None
        if not metadata.end_session_endpoint:
            return None
        query = {"client_id": self._settings.client_id, "post_logout_redirect_uri": post_logout_redirect_uri}
        if id_token:
            query["id_token_hint"] = id_token
        separator = "&" if urlsplit(metadata.end_session_endpoint).query else "?"
        return metadata.end_session_endpoint + separator + urlencode(query)

    async def revoke(self, refresh_token: str) -> bool:
        return await self._endpoint.revoke(refresh_token, "refresh_token")
