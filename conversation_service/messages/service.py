"""Posting a user message: validate, store once (idempotent on ``client_message_id``), show it on
the live stream, hand it to the ``ReplyDispatcher``, record the routing decision."""

from __future__ import annotations

import logging

from sqlalchemy.exc import IntegrityError

from conversation_service.auth.tokens import AuthenticatedUser
from conversation_service.conversations.repository import ConversationRepository
from conversation_service.conversations.service import get_owned_conversation
from conversation_service.db.models import Message, MessageRole
from conversation_service.db.repository import unit_of_work
from conversation_service.errors import InvalidInput, NotFound, PayloadTooLarge
from conversation_service.messages.repository import MessageRepository
from conversation_service.messages.schemas import MessageAccepted, MessageOut, RouteOut
from conversation_service.realtime.frames import FrameType
from conversation_service.state import ServiceState

log = logging.getLogger(__name__)


def message_frame_data(message: Message) -> dict:
    return MessageOut.model_validate(message).model_dump(mode="json")


def _accepted(message: Message, duplicate: bool) -> MessageAccepted:
    route = (message.agent_metadata or {}).get("route") or {}
    return MessageAccepted(
        message_id=message.id,
        conversation_id=message.conversation_id,
        # A repeat that races the first request's dispatch sees the decision as still pending.
        route=RouteOut(target=route.get("target", "pending"), reason=route.get("reason", "in_progress")),
        duplicate=duplicate,
    )


async def post_message(
    state: ServiceState,
    user: AuthenticatedUser,
    conversation_id: str,
    content: str,
    client_message_id: str | None,
) -> MessageAccepted:
    if len(content) > state.settings.max_message_chars:
        raise PayloadTooLarge(f"message content is limited to {state.settings.max_message_chars} characters")
    if not content.strip():
        raise InvalidInput("message content is empty")

    try:
        async with unit_of_work(state.sessionmaker) as session:
            conversation = await get_owned_conversation(session, user, conversation_id)
            messages = MessageRepository(session)
            if client_message_id is not None:
                existing = await messages.get_by_client_id(conversation_id, client_message_id)
                if existing is not None:
                    state.metrics.messages.deduplicated.inc()
                    return _accepted(existing, duplicate=True)
            message = await messages.create(
                conversation_id=conversation_id,
                role=MessageRole.USER.value,
                content=content,
                client_message_id=client_message_id,
            )
            await ConversationRepository(session).touch(conversation_id)
    except IntegrityError:
        # A concurrent request with the same client_message_id won the insert: answer with its row.
        if client_message_id is None:
            raise
        async with unit_of_work(state.sessionmaker) as session:
            existing = await MessageRepository(session).get_by_client_id(conversation_id, client_message_id)
        if existing is None:
            raise NotFound("conversation not found") from None
        state.metrics.messages.deduplicated.inc()
        return _accepted(existing, duplicate=True)

    # Committed before any reply work starts, so the reply's history read includes it.
    await state.publisher.emit(conversation_id, FrameType.MESSAGE_CREATED, message_frame_data(message))
    try:
        decision = await state.dispatcher.dispatch(conversation, message)
        route = {"target": decision.target, "reason": decision.reason}
    except Exception:
        # The message is accepted: it must end in something the user sees, never silence.
        log.exception("reply dispatch failed", extra={"message_id": message.id})
        route = {"target": "none", "reason": "dispatch_failed"}
        await state.publisher.emit(
            conversation_id,
            FrameType.NOTICE,
            {"code": "dispatch_failed", "text": "Your message was saved but could not be answered. Please retry."},
        )
    metadata = {**(message.agent_metadata or {}), "route": route}
    async with unit_of_work(state.sessionmaker) as session:
        await MessageRepository(session).set_agent_metadata(message.id, metadata)
    message.agent_metadata = metadata
    state.metrics.messages.posted[route["target"]].inc()
    log.info("message accepted", extra={"message_id": message.id, "route_target": route["target"],
                                        "route_reason": route["reason"], "chars": len(content)})
    return _accepted(message, duplicate=False)


async def list_messages(state: ServiceState, conversation_id: str, *, limit: int, offset: int) -> list[Message]:
    async with unit_of_work(state.sessionmaker) as session:
        return await MessageRepository(session).list(conversation_id, limit=limit, offset=offset)
