"""``ReplyControl``: stop a reply while it streams; answer a user message again (regenerate, retry).

Stop works whichever replica streams the reply: the request is stored on the turn's row first.
An agent reply is stopped at its source: the Agent Service's run (its cancel ends the run with
ERROR ``CANCELLED``) or an A2A agent's task (``CancelTask``: it ends CANCELED), whose end the
``AgentEventProcessor`` of the replica following it ends as ``stopped``. A direct reply's stream is a task of the replica that runs it: stopped at once when
that is this one (``ReplyStops``), else by the owner's next lease renewal, which reads the flag.

Regenerate replaces the last answer rather than adding a second one: a chat user who asks for
another answer wants that one in its place, and the model must not read the answer it replaces
(a ``replaced`` message is in no prompt). The old message stays stored, marked ``replaced``, so
the history keeps what was said; pages drop it (``message.replaced``). The new answer goes
through the same dispatch as a new message: routing decides again between the agent and the
direct LLM. A failed or interrupted answer is retried the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from conversation_service.agent_client import AgentServiceError
from conversation_service.agent_delegation.targets import AgentTargets
from conversation_service.agent_sessions.repository import AgentSessionRepository
from conversation_service.auth.tokens import AuthenticatedUser
from conversation_service.conversations.service import get_owned_conversation
from conversation_service.db.models import Message, MessageRole, MessageStatus, TurnStatus
from conversation_service.errors import Conflict, NotFound, Unavailable
from conversation_service.messages.repository import MessageRepository
from conversation_service.messages.schemas import RouteOut
from conversation_service.messages.service import MessageService
from conversation_service.realtime.frames import MessageReplaced
from conversation_service.realtime.publisher import FramePublisher
from conversation_service.reply_control.schemas import RegenerateAccepted, StopAccepted
from conversation_service.turns.leases import TurnLeases
from conversation_service.turns.repository import TurnRepository
from shared.admission import Slot
from shared.transactions import transaction

log = logging.getLogger(__name__)

NOT_STREAMING = "only a reply that is still streaming can be stopped"
# An answer may be asked for again once it has ended, however it ended.
_ENDED = (MessageStatus.COMPLETE.value, MessageStatus.ERROR.value, MessageStatus.STOPPED.value)


class ReplyControl:
    def __init__(
        self, sessionmaker: async_sessionmaker, publisher: FramePublisher, leases: TurnLeases,
        messages: MessageService, targets: AgentTargets, flush_frames: Callable[[], Awaitable[None]],
    ) -> None:
        self._flush_frames = flush_frames  # this replica's frames (and turn progress) not committed yet
        self._sessionmaker = sessionmaker
        self._publisher = publisher
        self._leases = leases
        self._messages = messages
        self._targets = targets

    async def stop(self, user: AuthenticatedUser, conversation_id: str, message_id: str) -> StopAccepted:
        turn_id, agent_session_id = await self._streaming_reply(user, conversation_id, message_id)
        if not await self._leases.request_stop(turn_id):
            raise Conflict(NOT_STREAMING)
        if agent_session_id:
            await self._cancel_run(agent_session_id)
        else:
            # Streamed here: stopped now. Streamed by another replica: its next renewal stops it.
            self._leases.stops.stop(turn_id)
        log.info("reply stop requested", extra={"message_id": message_id})
        return StopAccepted(message_id=message_id)

    async def _streaming_reply(
        self, user: AuthenticatedUser, conversation_id: str, message_id: str
    ) -> tuple[str, str | None]:
        """The turn of reply ``message_id`` still streaming, and its agent session for an agent reply.

        An agent reply's row is written in the background once its first frames are out, so a stop
        right after the first words may find no row yet: the turn's progress (stored with those
        frames) names the reply then. Frames this replica has not committed yet are flushed first.
        """
        for flushed in (False, True):
            async with transaction(self._sessionmaker) as session:
                await get_owned_conversation(session, user, conversation_id)
                message = await MessageRepository(session).get(message_id) if len(message_id) <= 64 else None
                if message is not None and message.conversation_id == conversation_id:
                    return _stoppable(message)
                turn = await TurnRepository(session).of_reply(conversation_id, message_id)
                if turn is not None:
                    if turn.status != TurnStatus.RUNNING.value:
                        raise Conflict(NOT_STREAMING)
                    return turn.id, turn.agent_session_id
            if not flushed:
                await self._flush_frames()
        raise NotFound("message not found")

    async def _cancel_run(self, agent_session_id: str) -> None:
        """The Agent Service's cancel of the session's run, or ``CancelTask`` of the A2A agent's task."""
        async with transaction(self._sessionmaker) as session:
            row = await AgentSessionRepository(session).get_by_agent_session_id(agent_session_id)
        try:
            await self._targets.cancel(row, agent_session_id)
        except AgentServiceError as exc:
            raise Unavailable("the agent could not be reached to stop the reply; try again") from exc

    async def regenerate(self, user: AuthenticatedUser, conversation_id: str, message_id: str) -> RegenerateAccepted:
        place = self._messages.admission.admit()  # refused: 503 with Retry-After, nothing changed
        try:
            return await self._regenerate(user, conversation_id, message_id, place)
        except BaseException:
            place.release()
            raise

    async def _regenerate(
        self, user: AuthenticatedUser, conversation_id: str, message_id: str, place: Slot,
    ) -> RegenerateAccepted:
        async with transaction(self._sessionmaker) as session:
            conversation = await get_owned_conversation(session, user, conversation_id)
            message = await _message_of(session, conversation_id, message_id)
            user_message = await _answered_message(session, message)
            await self._reopen_turn(session, user_message)
            messages = MessageRepository(session)
            await messages.finish(message.id, content=message.content, status=MessageStatus.REPLACED.value)
            # The n-th answer to the message: a new agent run (``run_key``), not the old one joined.
            metadata = user_message.agent_metadata or {}
            user_message.agent_metadata = {**metadata, "attempt": int(metadata.get("attempt", 0)) + 1}
            await messages.set_agent_metadata(user_message.id, user_message.agent_metadata)
        await self._publisher.emit(
            conversation_id, MessageReplaced(message.id, user_message.id),
        )
        route = await self._messages.reply_to(conversation, user_message, place)
        log.info("reply regenerated", extra={"message_id": message.id, "route_target": route["target"]})
        return RegenerateAccepted(replaced_message_id=message.id, in_reply_to=user_message.id,
                                  route=RouteOut(target=route["target"], reason=route["reason"]))

    async def _reopen_turn(self, session: AsyncSession, user_message: Message) -> None:
        """The user message's turn runs again, owned here: from the commit on, the new answer has
        an owner or a takeover, like a new message's."""
        if await TurnRepository(session).running_in(user_message.conversation_id):
            raise Conflict("a reply is still streaming in this conversation")
        if not await self._leases.reopen(session, user_message.id, user_message.conversation_id):
            raise Conflict("a reply is still streaming in this conversation")


def _stoppable(message: Message) -> tuple[str, str | None]:
    metadata = message.agent_metadata or {}
    turn_id = metadata.get("in_reply_to")
    streaming = message.role == MessageRole.ASSISTANT.value and message.status == MessageStatus.STREAMING.value
    if not streaming or not isinstance(turn_id, str):
        raise Conflict(NOT_STREAMING)
    agent = metadata.get("path") == "agent" and message.agent_session_id
    return turn_id, message.agent_session_id if agent else None


async def _message_of(session: AsyncSession, conversation_id: str, message_id: str) -> Message:
    message = await MessageRepository(session).get(message_id) if len(message_id) <= 64 else None
    if message is None or message.conversation_id != conversation_id:
        raise NotFound("message not found")
    return message


async def _answered_message(session: AsyncSession, message: Message) -> Message:
    """The user message ``message`` answers, when ``message`` is an answer that may be replaced:
    the conversation's last, ended, and not a question of the agent's (that one is answered)."""
    if message.role != MessageRole.ASSISTANT.value:
        raise Conflict("only an assistant reply can be regenerated")
    if message.status not in _ENDED:
        raise Conflict("the reply is still streaming, or was replaced already")
    metadata = message.agent_metadata or {}
    if metadata.get("ask_user"):
        raise Conflict("the reply is the agent's question: answer it instead")
    messages = MessageRepository(session)
    last = await messages.last_shown(message.conversation_id)
    if last is None or last.id != message.id:
        raise Conflict("only the last reply of the conversation can be regenerated")
    in_reply_to = metadata.get("in_reply_to")
    user_message = await messages.get(in_reply_to) if isinstance(in_reply_to, str) else None
    if user_message is None or user_message.role != MessageRole.USER.value:
        raise Conflict("the message this reply answered is gone")
    return user_message
