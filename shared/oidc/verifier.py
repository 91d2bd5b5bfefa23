"""Access tokens of the identity provider: checked, then read as who calls.

A token is accepted only when its header's ``alg`` is on the allowlist (asymmetric only: never
``none``, never HS256, whatever the header says), its ``kid`` names one of the provider's signing
keys of that algorithm's kind, the signature verifies, ``iss`` is the issuer exactly, ``aud`` holds
this service's audience, and ``exp``, ``nbf`` and ``iat`` hold with the leeway. PyJWT does the
checks; the algorithm is pinned from the allowlist, never taken from the token.

Only access tokens are bearer tokens: ``verify`` refuses an ID token whatever its audience (a sign-in
client whose id is also the API's audience would otherwise pass its ID token off as an access token,
and the page holds one for logout). An ID token is told by what only ID tokens carry (``nonce``,
``at_hash``, ``c_hash``, Keycloak's ``typ: ID``) and, where the provider marks its access tokens
(RFC 9068 ``typ: at+jwt``, ``access_token_typ``), by a header without that mark. ``verify_id_token``
checks the sign-in's own ID token.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jwt

from shared.oidc.errors import InvalidToken
from shared.oidc.provider import IdentityProvider
from shared.oidc.settings import OIDCSettings

MAX_TOKEN_CHARS = 16_384
MAX_CLAIM_CHARS = 256
MAX_PERMISSIONS = 200
# The key type each algorithm family signs with, and the curve of each EC algorithm.
_KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC"}
_CURVES = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}


@dataclass(frozen=True, slots=True)
class VerifiedToken:
    subject: str
    org: str | None
    permissions: tuple[str, ...]
    expires_at: float
    claims: dict[str, Any]


def claim(claims: dict[str, Any], name: str) -> Any:
    """A claim by name, or by a dotted path into nested claims when no claim has that name."""
    if name in claims:
        return claims[name]
    value: Any = claims
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _text(value: Any, what: str) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value or len(value) > MAX_CLAIM_CHARS or not value.isprintable():
        raise InvalidToken(f"the token's {what} claim is missing or invalid", "claims")
    return value


def _permissions(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):  # a space-separated list, as the scope claim is
        value = value.split()
    if not isinstance(value, list) or len(value) > MAX_PERMISSIONS:
        raise InvalidToken("the token's permissions claim is invalid", "claims")
    return tuple(_text(item, "permissions") for item in value)


class AccessTokenVerifier:
    """``verify(token)``: the caller, or ``InvalidToken``; ``ProviderUnavailable`` when the provider's
    keys are needed and cannot be had. ``on_reject(reason)`` counts refusals."""

    def __init__(
        self, settings: OIDCSettings, provider: IdentityProvider, *, on_reject: Callable[[str], None] | None = None,
    ) -> None:
        if not settings.issuer or not settings.audience:
            raise ValueError("an AccessTokenVerifier needs an issuer and an audience")
        self._settings = settings
        self._provider = provider
        self._on_reject = on_reject or (lambda _reason: None)
        self._algorithms = frozenset(settings.algorithms)

    @property
    def provider(self) -> IdentityProvider:
        return self._provider

    async def verify(self, token: str) -> VerifiedToken:
        """An access token for this service's audience (never an ID token)."""
        try:
            return await self._verify(token, self._settings.audience or "", access=True)
        except InvalidToken as exc:
            self._on_reject(exc.reason)
            raise

    async def verify_id_token(self, token: str, *, audience: str) -> VerifiedToken:
        """The ID token a sign-in got for ``audience`` (the sign-in client), checked as any token is."""
        try:
            return await self._verify(token, audience, access=False)
        except InvalidToken as exc:
            self._on_reject(exc.reason)
            raise

    async def _verify(self, token: str, audience: str, *, access: bool) -> VerifiedToken:
        if not token or len(token) > MAX_TOKEN_CHARS:
            raise InvalidToken("missing or oversized token", "malformed")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise InvalidToken("the token is not a JWT", "malformed") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self._algorithms:
            raise InvalidToken("the token's signing algorithm is not allowed", "algorithm")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise InvalidToken("the token's key id is invalid", "malformed")
        key = await self._provider.signing_key(kid)
        if key is None:
            raise InvalidToken("the token is signed with a key the identity provider does not have", "unknown_key")
        if (_KEY_TYPES.get(alg[:2]) != key.kty or (key.alg is not None and key.alg != alg)
                or (key.kty == "EC" and key.crv != _CURVES.get(alg))):
            raise InvalidToken("the token's algorithm does not fit its key", "algorithm")
        claims = self._decode(token, key.key, alg, audience)
        if access and not self._is_access_token(header, claims):
            raise InvalidToken("an ID token is not a bearer token; send an access token", "id_token")
        subject = _text(claim(claims, self._settings.user_claim), "user")
        org = claim(claims, self._settings.org_claim)
        return VerifiedToken(
            subject=subject, org=None if org is None else _text(org, "organisation"),
            permissions=_permissions(claim(claims, self._settings.permissions_claim)),
            expires_at=float(claims["exp"]), claims=claims,
        )

    def _is_access_token(self, header: dict[str, Any], claims: dict[str, Any]) -> bool:
        if any(name in claims for name in _ID_TOKEN_CLAIMS) or claims.get("typ") == "ID":
            return False
        wanted = self._settings.access_token_typ
        return wanted is None or _media_type(header.get("typ")) == _media_type(wanted)

    def _decode(self, token: str, key: Any, alg: str, audience: str) -> dict[str, Any]:
        try:
            return jwt.decode(
                token, key, algorithms=[alg], audience=audience, issuer=self._settings.issuer,
                leeway=self._settings.leeway_s, options={"require": ["exp", "iat", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            message, reason = next(
                (found for kind, found in _DECODE_ERRORS if isinstance(exc, kind)), ("invalid token", "invalid"))
            raise InvalidToken(message, reason) from None


# Claims only an ID token carries (OpenID Connect Core 2, 3.1.3.6, 3.3.2.11): never in an access token.
_ID_TOKEN_CLAIMS = ("nonce", "at_hash", "c_hash")


def _media_type(value: Any) -> str | None:
    """A ``typ`` header as a media type (RFC 7515 4.1.9: ``application/`` may be left out), lowercased."""
    if not isinstance(value, str):
        return None
    value = value.strip().lower()
    return value if "/" in value else f"application/{value}"


# PyJWT's errors as the answer names them (subclasses before their bases), and the metric's reason.
_DECODE_ERRORS: tuple[tuple[type[jwt.PyJWTError], tuple[str, str]], ...] = (
    (jwt.ExpiredSignatureError, ("the token expired", "expired")),
    (jwt.ImmatureSignatureError, ("the token is not valid yet", "not_yet_valid")),
    (jwt.InvalidAudienceError, ("the token is for another audience", "audience")),
    (jwt.InvalidIssuerError, ("the token is from another issuer", "issuer")),
    (jwt.InvalidSignatureError, ("the token's signature does not verify", "signature")),
)
