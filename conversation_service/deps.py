"""Request dependencies as ``Annotated`` aliases: a route's signature says what it needs and
what it checks (``CurrentUser``: a valid token; ``OwnedConversation``: the caller owns it).

The started parts are read from ``app.state`` here and nowhere else in the service's code (by
coroutines: FastAPI runs a plain function dependency in a worker thread).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Path
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import HTTPConnection

from conversation_service.agent_client import AgentServiceClient
from conversation_service.auth.tokens import AuthenticatedUser, verify_token
from conversation_service.conversations.service import get_owned_conversation
from conversation_service.db.models import Conversation
from conversation_service.dead_letters.replay import DeadLetterReplayer
from conversation_service.errors import Unauthorized
from conversation_service.interactions.service import AnswerService
from conversation_service.lifespan import AgentParts, Realtime, Storage
from conversation_service.messages.service import MessageService
from conversation_service.metrics import ConversationMetrics
from conversation_service.reply_control.service import ReplyControl
from conversation_service.settings import ConversationSettings


async def _settings(conn: HTTPConnection) -> ConversationSettings:
    return conn.app.state.settings


async def _metrics(conn: HTTPConnection) -> ConversationMetrics:
    return conn.app.state.metrics


async def _storage(conn: HTTPConnection) -> Storage:
    return conn.app.state.storage


async def _realtime(conn: HTTPConnection) -> Realtime:
    return conn.app.state.realtime


async def _agent(conn: HTTPConnection) -> AgentParts:
    return conn.app.state.agent


async def _messages(conn: HTTPConnection) -> MessageService:
    return conn.app.state.messages


async def _answers(conn: HTTPConnection) -> AnswerService:
    return conn.app.state.agent.answers


async def _dead_letters(conn: HTTPConnection) -> DeadLetterReplayer:
    return conn.app.state.dead_letters


async def _reply_control(conn: HTTPConnection) -> ReplyControl:
    return conn.app.state.reply_control


async def _agent_client(conn: HTTPConnection) -> AgentServiceClient:
    return conn.app.state.agent_client


SettingsDep = Annotated[ConversationSettings, Depends(_settings)]
MetricsDep = Annotated[ConversationMetrics, Depends(_metrics)]
StorageDep = Annotated[Storage, Depends(_storage)]
RealtimeDep = Annotated[Realtime, Depends(_realtime)]
AgentDep = Annotated[AgentParts, Depends(_agent)]
MessageServiceDep = Annotated[MessageService, Depends(_messages)]
AnswerServiceDep = Annotated[AnswerService, Depends(_answers)]
DeadLetterReplayerDep = Annotated[DeadLetterReplayer, Depends(_dead_letters)]
AgentClientDep = Annotated[AgentServiceClient, Depends(_agent_client)]
ReplyControlDep = Annotated[ReplyControl, Depends(_reply_control)]


async def get_session(storage: StorageDep) -> AsyncIterator[AsyncSession]:
    """The request's unit of work: commit once on success, roll back on error.

    Used with ``scope="function"``: the commit runs when the route returns, before the response
    is sent. With the default (request) scope it ran after the response, so a client that acted
    on a 201 at once (opening the new conversation's WebSocket) could find no row yet."""
    async with storage.sessionmaker() as session:
        try:
            yield session
            await session.commit()
        except BaseException:
            await session.rollback()
            raise


SessionDep = Annotated[AsyncSession, Depends(get_session, scope="function")]

_bearer = HTTPBearer(auto_error=False, description="HS256 JWT: sub = user id, org = organisation id")


def get_current_user(
    settings: SettingsDep, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> AuthenticatedUser:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthorized("missing bearer token")
    return verify_token(
        credentials.credentials, settings.auth_jwt_secret.get_secret_value(), leeway_s=settings.auth_jwt_leeway_s
    )


CurrentUser = Annotated[AuthenticatedUser, Depends(get_current_user)]


async def get_owned(
    session: SessionDep, user: CurrentUser, conversation_id: Annotated[str, Path(max_length=64)]
) -> Conversation:
    return await get_owned_conversation(session, user, conversation_id)


OwnedConversation = Annotated[Conversation, Depends(get_owned)]
