"""Request dependencies as ``Annotated`` aliases: a route's signature says what it needs and
what it checks (``CurrentUser``: a valid token; ``OwnedConversation``: the caller owns it).

The started parts are read from ``app.state`` here and nowhere else in the service's code (by
coroutines: FastAPI runs a plain function dependency in a worker thread).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, Path
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import HTTPConnection

from conversation_service.agent_client import AgentServiceClient
from conversation_service.auth.guard import Authentication
from conversation_service.auth.tokens import AuthenticatedUser
from conversation_service.conversations.service import get_owned_conversation
from conversation_service.db.models import Conversation
from conversation_service.db.repository import unit_of_work
from conversation_service.dead_letters.replay import DeadLetterReplayer
from conversation_service.interactions.service import AnswerService
from conversation_service.lifespan import AgentParts, Realtime, Storage
from conversation_service.messages.service import MessageService
from conversation_service.metrics import ConversationMetrics
from conversation_service.reply_control.service import ReplyControl
from conversation_service.settings import ConversationSettings


def _state(name: str, part: str | None = None) -> Callable[[HTTPConnection], Awaitable[Any]]:
    """A dependency that reads ``app.state.<name>`` (and its ``<part>``)."""

    async def started_part(conn: HTTPConnection) -> Any:
        value = getattr(conn.app.state, name)
        return value if part is None else getattr(value, part)

    return started_part


SettingsDep = Annotated[ConversationSettings, Depends(_state("settings"))]
MetricsDep = Annotated[ConversationMetrics, Depends(_state("metrics"))]
StorageDep = Annotated[Storage, Depends(_state("storage"))]
RealtimeDep = Annotated[Realtime, Depends(_state("realtime"))]
AgentDep = Annotated[AgentParts, Depends(_state("agent"))]
MessageServiceDep = Annotated[MessageService, Depends(_state("messages"))]
AnswerServiceDep = Annotated[AnswerService, Depends(_state("agent", "answers"))]
DeadLetterReplayerDep = Annotated[DeadLetterReplayer, Depends(_state("dead_letters"))]
AgentClientDep = Annotated[AgentServiceClient, Depends(_state("agent_client"))]
ReplyControlDep = Annotated[ReplyControl, Depends(_state("reply_control"))]
AuthDep = Annotated[Authentication, Depends(_state("auth"))]


async def get_session(storage: StorageDep) -> AsyncIterator[AsyncSession]:
    """The request's unit of work: commit once on success, roll back on error.

    Used with ``scope="function"``: the commit runs when the route returns, before the response
    is sent. With the default (request) scope it ran after the response, so a client that acted
    on a 201 at once (opening the new conversation's WebSocket) could find no row yet."""
    async with unit_of_work(storage.sessionmaker) as session:
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


async def get_owned(
    session: SessionDep, user: CurrentUser, conversation_id: Annotated[str, Path(max_length=64)]
) -> Conversation:
    return await get_owned_conversation(session, user, conversation_id)


OwnedConversation = Annotated[Conversation, Depends(get_owned)]
