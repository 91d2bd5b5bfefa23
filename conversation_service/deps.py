"""The service-wide request dependencies as ``Annotated`` aliases: a route's signature says what it
needs and what it checks (``CurrentUser``: a valid token or page session; ``SessionDep``: the
request's unit of work). A domain's own parts have their aliases beside its router, or in its
package's ``deps.py`` when other packages use them too (``OwnedConversation`` in
``conversations/deps.py``, ``AuthDep`` in ``auth/deps.py``, ``MessageServiceDep`` in ``messages/deps.py``).

Every alias reads the started parts from ``app.state`` through ``shared.app_state.started``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import HTTPConnection

from conversation_service.auth.deps import AuthDep
from conversation_service.auth.tokens import AuthenticatedUser
from conversation_service.db.storage import Storage
from conversation_service.metrics import ConversationMetrics
from conversation_service.realtime.parts import Realtime
from conversation_service.settings import ConversationSettings
from shared.app_state import started
from shared.transactions import transaction

SettingsDep = Annotated[ConversationSettings, Depends(started("settings"))]
MetricsDep = Annotated[ConversationMetrics, Depends(started("metrics"))]
StorageDep = Annotated[Storage, Depends(started("storage"))]
RealtimeDep = Annotated[Realtime, Depends(started("realtime"))]


async def get_session(storage: StorageDep) -> AsyncIterator[AsyncSession]:
    """The request's unit of work: commit once on success, roll back on error.

    Used with ``scope="function"``: the commit runs when the route returns, before the response
    is sent. With the default (request) scope it ran after the response, so a client that acted
    on a 201 at once (opening the new conversation's WebSocket) could find no row yet."""
    async with transaction(storage.sessionmaker) as session:
        yield session


SessionDep = Annotated[AsyncSession, Depends(get_session, scope="function")]

_bearer = HTTPBearer(auto_error=False, description=(
    "The identity provider's access token for AUTH_OIDC_AUDIENCE (RS256/ES256) or, without AUTH_OIDC_ISSUER, "
    "an HS256 development JWT (sub = user id, org = organisation id). The chat page signs in with a session "
    "cookie instead (and X-CSRF-Token on what changes something)."
))


async def get_current_user(
    conn: HTTPConnection, auth: AuthDep,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> AuthenticatedUser:
    return await auth.request_user(conn)


CurrentUser = Annotated[AuthenticatedUser, Depends(get_current_user)]
