"""Posting a user message: validate, take a place for its reply (``turns.admission``: 503 at once when
there is none, nothing stored), store once (idempotent on ``client_message_id``), show it on the live
stream, hand it to the ``ReplyDispatcher`` (at once, or once a place is free), record the routing
decision."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import async_sessionmaker

from conversation_service.auth.tokens import AuthenticatedUser
from conversation_service.conversations.repository import ConversationRepository
from conversation_service.conversations.service import get_owned_conversation, name_after_first_message
from conversation_service.db.models import Conversation, Message, MessageRole
from conversation_service.errors import InvalidInput, NotFound, PayloadTooLarge
from conversation_service.messages.repository import MessageRepository
from conversation_service.messages.schemas import MessageAccepted, RouteOut, message_frame_data
from conversation_service.metrics import MessageMetrics
from conversation_service.realtime.frames import AgentWaiting, MessageCreated, Notice
from conversation_service.realtime.publisher import FramePublisher
from conversation_service.routing.schemas import RouteDecision
from conversation_service.tasks import TaskSupervisor
from conversation_service.turns.admission import capacity_wait
from conversation_service.turns.leases import TurnLeases
from shared.admission import Admission, Slot
from shared.transactions import transaction

log = logging.getLogger(__name__)


class ReplyDispatcher(Protocol):
    """What happens after a user message is stored: the route is decided without any network call,
    the reply starts in the background, and the decision comes back at once (the POST answers 202
    before the first token)."""

    async def dispatch(self, conversation: Conversation, user_message: Message) -> RouteDecision: ...


def _accepted(message: Message, duplicate: bool) -> MessageAccepted:
    route = (message.agent_metadata or {}).get("route") or {}
    return MessageAccepted(
        message_id=message.id,
        conversation_id=message.conversation_id,
        # A repeat that races the first request's dispatch sees the decision as still pending.
        route=RouteOut(target=route.get("target", "pending"), reason=route.get("reason", "in_progress")),
        duplicate=duplicate,
    )


# The route a message waiting for a place is answered with; the routing decision comes once it has one.
QUEUED_ROUTE = {"target": "pending", "reason": "capacity"}


class MessageService:
    def __init__(
        self, sessionmaker: async_sessionmaker, publisher: FramePublisher, dispatcher: ReplyDispatcher,
        metrics: MessageMetrics, leases: TurnLeases, *, max_chars: int, admission: Admission,
        tasks: TaskSupervisor,
    ) -> None:
        self.admission = admission
        self._tasks = tasks
        self._leases = leases
        self._sessionmaker = sessionmaker
        self._publisher = publisher
        self._dispatcher = dispatcher
        self._metrics = metrics
        self._max_chars = max_chars

    async def post(
        self, user: AuthenticatedUser, conversation_id: str, content: str, client_message_id: str | None
    ) -> MessageAccepted:
        if len(content) > self._max_chars:
            raise PayloadTooLarge(f"message content is limited to {self._max_chars} characters")
        if not content.strip():
            raise InvalidInput("message content is empty")
        place = self.admission.admit()  # refused: 503 with Retry-After, nothing stored
        try:
            stored = await self._store(user, conversation_id, content, client_message_id)
        except BaseException:
            place.release()
            raise
        if isinstance(stored, MessageAccepted):
            place.release()  # a repeat: the first post's reply has its own
            return stored
        conversation, message = stored
        # Committed before any reply work starts, so the reply's history read includes it.
        await self._publisher.emit(conversation_id, MessageCreated(message_frame_data(message)))
        route = await self.reply_to(conversation, message, place)
        self._metrics.posted[route["target"]].inc()
        log.info("message accepted", extra={"message_id": message.id, "route_target": route["target"],
                                            "route_reason": route["reason"], "chars": len(content)})
        return MessageAccepted(message_id=message.id, conversation_id=message.conversation_id,
                               route=RouteOut(**route), duplicate=False)

    async def _store(
        self, user: AuthenticatedUser, conversation_id: str, content: str, client_message_id: str | None
    ) -> tuple[Conversation, Message] | MessageAccepted:
        """The new message, or the answer to a repeat of its ``client_message_id``."""
        try:
            async with transaction(self._sessionmaker) as session:
                conversation = await get_owned_conversation(session, user, conversation_id)
                messages = MessageRepository(session)
                if client_message_id is not None:
                    existing = await messages.get_by_client_id(conversation_id, client_message_id)
                    if existing is not None:
                        self._metrics.deduplicated.inc()
                        return _accepted(existing, duplicate=True)
                message = await messages.create(
                    conversation_id=conversation_id, role=MessageRole.USER.value, content=content,
                    client_message_id=client_message_id,
                )
                await ConversationRepository(session).touch(conversation_id)
                await name_after_first_message(session, conversation, content)
                # Accepted from the commit on: the message has a turn that some replica ends.
                await self._leases.open(session, message.id, conversation_id)
            return conversation, message
        except IntegrityError:
            # A concurrent request with the same client_message_id won the insert: answer with its row.
            if client_message_id is None:
                raise
        async with transaction(self._sessionmaker) as session:
            existing = await MessageRepository(session).get_by_client_id(conversation_id, client_message_id)
        if existing is None:
            raise NotFound("conversation not found")
        self._metrics.deduplicated.inc()
        return _accepted(existing, duplicate=True)

    async def reply_to(self, conversation: Conversation, message: Message, place: Slot) -> dict[str, str]:
        """Start the reply to a stored user message whose turn is open, in ``place`` (taken before the
        message was stored); its routing decision is recorded on the message (as the 202 shows it)
        and returned. A queued place: the reply starts once it has one (``QUEUED_ROUTE``)."""
        if not place.granted:
            self._queue(conversation, message, place)
            return QUEUED_ROUTE
        try:
            with self._tasks.carrying(place):
                route = await self._dispatch(conversation, message)
        finally:
            if not place.carried:
                place.release()  # no reply task took it: the dispatch failed, or answered nothing here
        metadata = {**(message.agent_metadata or {}), "route": route}
        async with transaction(self._sessionmaker) as session:
            await MessageRepository(session).set_agent_metadata(message.id, metadata)
        message.agent_metadata = metadata
        return route

    async def _dispatch(self, conversation: Conversation, message: Message) -> dict[str, str]:
        try:
            decision = await self._dispatcher.dispatch(conversation, message)
            return {"target": decision.target.path, "reason": decision.reason.value}
        except Exception:
            # The message is accepted: it must end in something the user sees, never silence.
            log.exception("reply dispatch failed", extra={"message_id": message.id})
            await self._publisher.emit(conversation.id, Notice(
                "dispatch_failed", "Your message was saved but could not be answered. Please retry."))
            await self._leases.finish(message.id)
            return {"target": "none", "reason": "dispatch_failed"}

    def _queue(self, conversation: Conversation, message: Message, place: Slot) -> None:
        # The turn is this replica's from now on: its lease is renewed while the message waits.
        self._leases.held.add(message.id)
        self._tasks.spawn(self._when_admitted(conversation, message, place), name=f"turn-queued:{message.id}")

    async def _when_admitted(self, conversation: Conversation, message: Message, place: Slot) -> None:
        async def show(data: dict) -> None:
            await self._publisher.emit(conversation.id, AgentWaiting(message_id=message.id, **data))

        try:
            await place.wait(capacity_wait(show))
        except asyncio.CancelledError:
            # Shutdown: the turn stays running, released for another replica's takeover.
            place.release()
            self._leases.held.discard(message.id)
            raise
        route = await self.reply_to(conversation, message, place)
        log.info("queued message answered", extra={"message_id": message.id, "route_target": route["target"]})
