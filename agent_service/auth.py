"""Who may call the Agent Service: an ``X-API-Key`` (every configured key is valid, for rotation;
compared in constant time) or, with ``AGENT_SERVICE_AUTH_OIDC_ISSUER``, an access token of that
identity provider for this service's audience (``Authorization: Bearer``; a caller's client
credentials), so an operator can drop the keys shared between services."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from agent_service.deps import SettingsDep
from agent_service.errors import IdentityProviderUnavailable, Unauthorized
from agent_service.settings import AgentServiceSettings
from shared.oidc.errors import InvalidToken, ProviderUnavailable
from shared.oidc.verifier import AccessTokenVerifier

_api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False)
_bearer = HTTPBearer(auto_error=False, description=(
    "An access token of AGENT_SERVICE_AUTH_OIDC_ISSUER for AGENT_SERVICE_AUTH_OIDC_AUDIENCE (when configured)"
))


def key_is_valid(presented: str, keys: list[str]) -> bool:
    presented_bytes = presented.encode()
    valid = False
    # No early exit: the time taken does not tell which key (or how much of one) matched.
    for key in keys:
        valid |= hmac.compare_digest(presented_bytes, key.encode())
    return valid


async def _token_verifier(request: Request) -> AccessTokenVerifier | None:
    return request.app.state.agent.token_verifier


async def require_caller(
    settings: SettingsDep, presented: Annotated[str | None, Depends(_api_key_header)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    verifier: Annotated[AccessTokenVerifier | None, Depends(_token_verifier)],
) -> None:
    await check_caller(settings, verifier, api_key=presented, bearer=credentials.credentials if credentials else None)


async def check_caller(
    settings: AgentServiceSettings, verifier: AccessTokenVerifier | None, *, api_key: str | None, bearer: str | None,
) -> None:
    """The one check of every route, the A2A ones included: a key, else a token, else refused."""
    if api_key is not None:
        if settings.api_keys and key_is_valid(api_key, settings.api_keys):
            return
        raise Unauthorized("missing or invalid X-API-Key")
    if bearer is not None and verifier is not None:
        try:
            await verifier.verify(bearer)
        except InvalidToken as exc:
            raise Unauthorized(str(exc)) from None
        except ProviderUnavailable:
            raise IdentityProviderUnavailable("the identity provider cannot be reached to check the token") from None
        return
    raise Unauthorized("missing or invalid X-API-Key" + (" or bearer token" if verifier is not None else ""))


# A route's signature says it needs an authenticated caller (a key or a token).
ApiKey = Annotated[None, Depends(require_caller)]
