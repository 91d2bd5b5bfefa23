"""Bearer tokens of the chat API, checked by one of two implementations chosen by configuration:

- ``DevelopmentTokens`` (no ``AUTH_OIDC_ISSUER``): HS256 JWTs signed with ``AUTH_JWT_SECRET``, as
  ``python -m conversation_service token`` prints them;
- ``ProviderTokens``: the identity provider's access tokens for ``AUTH_OIDC_AUDIENCE``. An HS256
  token is refused like any other algorithm off the allowlist.
"""

from __future__ import annotations

from typing import Protocol

from conversation_service.auth.tokens import AuthenticatedUser, verify_token
from conversation_service.errors import Unauthorized, Unavailable
from shared.oidc.errors import InvalidToken, ProviderUnavailable
from shared.oidc.verifier import AccessTokenVerifier, VerifiedToken


class BearerAuthenticator(Protocol):
    async def authenticate(self, token: str) -> AuthenticatedUser:
        """The caller, or ``Unauthorized`` (``Unavailable`` when the answer depends on a provider that is away)."""
        ...


class DevelopmentTokens:
    def __init__(self, secret: str, *, leeway_s: float) -> None:
        self._secret = secret
        self._leeway_s = leeway_s

    async def authenticate(self, token: str) -> AuthenticatedUser:
        return verify_token(token, self._secret, leeway_s=self._leeway_s)


def user_of(verified: VerifiedToken, *, leeway_s: float, name: str | None = None) -> AuthenticatedUser:
    return AuthenticatedUser(
        user_id=verified.subject, org_id=verified.org, permissions=verified.permissions,
        expires_at=verified.expires_at + leeway_s, name=name,
    )


class ProviderTokens:
    def __init__(self, verifier: AccessTokenVerifier, *, leeway_s: float) -> None:
        self.verifier = verifier
        self._leeway_s = leeway_s

    async def authenticate(self, token: str) -> AuthenticatedUser:
        try:
            verified = await self.verifier.verify(token)
        except InvalidToken as exc:
            raise Unauthorized(str(exc)) from None
        except ProviderUnavailable:
            raise Unavailable("the identity provider cannot be reached to check the token; try again shortly") from None
        return user_of(verified, leeway_s=self._leeway_s)
