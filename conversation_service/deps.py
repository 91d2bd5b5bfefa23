"""Request dependencies as ``Annotated`` aliases: a route's signature says what it needs and
what it checks (``CurrentUser``: a valid token; ``OwnedConversation``: the caller owns it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Path
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import HTTPConnection

from conversation_service.auth.tokens import AuthenticatedUser, verify_token
from conversation_service.conversations.service import get_owned_conversation
from conversation_service.db.models import Conversation
from conversation_service.errors import Unauthorized
from conversation_service.state import ServiceState


def get_state(conn: HTTPConnection) -> ServiceState:
    return conn.app.state.services


StateDep = Annotated[ServiceState, Depends(get_state)]


async def get_session(state: StateDep) -> AsyncIterator[AsyncSession]:
    """The request's unit of work: commit once on success, roll back on error.

    Used with ``scope="function"``: the commit runs when the route returns, before the response
    is sent. With the default (request) scope it ran after the response, so a client that acted
    on a 201 at once (opening the new conversation's WebSocket) could find no row yet."""
    async with state.sessionmaker() as session:
        try:
            yield session
            await session.commit()
        except BaseException:
            await session.rollback()
            raise


SessionDep = Annotated[AsyncSession, Depends(get_session, scope="function")]

_bearer = HTTPBearer(auto_error=False, description="HS256 JWT: sub = user id, org = organisation id")


def get_current_user(
    state: StateDep, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> AuthenticatedUser:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthorized("missing bearer token")
    return verify_token(
        credentials.credentials,
        state.settings.auth_jwt_secret.get_secret_value(),
        leeway_s=state.settings.auth_jwt_leeway_s,
    )


CurrentUser = Annotated[AuthenticatedUser, Depends(get_current_user)]


async def get_owned(
    session: SessionDep, user: CurrentUser, conversation_id: Annotated[str, Path(max_length=64)]
) -> Conversation:
    return await get_owned_conversation(session, user, conversation_id)


OwnedConversation = Annotated[Conversation, Depends(get_owned)]
