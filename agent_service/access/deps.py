"""The routes' side of access: every route that needs a caller names it in its signature
(``CurrentCaller``, or ``Caller`` with a permission: ``RunsCaller``, ``MemoryCaller``), resolved once per
request by the app's ``CallerResolver`` (``AgentState.callers``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from agent_service.access.caller import Caller, Permission
from agent_service.access.resolver import CallerResolver
from shared.app_state import started

_api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False)
_bearer = HTTPBearer(auto_error=False, description=(
    "An access token of AGENT_SERVICE_AUTH_OIDC_ISSUER for AGENT_SERVICE_AUTH_OIDC_AUDIENCE (when configured)"
))
ResolverDep = Annotated[CallerResolver, Depends(started("agent", "callers"))]


async def current_caller(
    resolver: ResolverDep, presented: Annotated[str | None, Depends(_api_key_header)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Caller:
    return await resolver.resolve(api_key=presented, bearer=credentials.credentials if credentials else None)


def caller_with(permission: Permission) -> Callable[..., Awaitable[Caller]]:
    async def permitted(caller: Annotated[Caller, Depends(current_caller)]) -> Caller:
        caller.require(permission)
        return caller

    return permitted


# A route's signature says who it needs: any authenticated caller, or one allowed through a door.
CurrentCaller = Annotated[Caller, Depends(current_caller)]
RunsCaller = Annotated[Caller, Depends(caller_with(Permission.RUNS))]
MemoryCaller = Annotated[Caller, Depends(caller_with(Permission.MEMORY))]
