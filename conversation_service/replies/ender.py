"""``ReplyEnder``: the one writer of a reply's end.

Every path that ends a reply (the agent's answer, question, error or cancel; the direct LLM's answer
or failure; a stop; a takeover; a fallback; a fault of this service's own) calls ``end`` with the
reply and its ``Ending``. In order:

1. the reply's own record is written first (``DeferredWrite``, when its start was deferred);
2. every frame of the reply shown so far is durable, or the ending becomes ``Failed``
   (``REPLY_NOT_SAVED``): nothing stored claims completion over a hole a resuming client would find;
3. one transaction (run again while the database is away, ``Transactions``) stores the message's
   final state (creating the row when its start was never written) and whatever else the ending
   changes (``Extras.also``: the agent session, a pending question);
4. the end frame goes out (``message.completed``, or ``message.error`` with the reason), then the
   ending's other frames (``agent.complete``, ``agent.ask_user``...), and the last is durable before
   ``end`` returns.

When any of that cannot be done in the database's retry budget, ``end`` raises ``TurnLeftRunning``:
the turn is not marked done, and a sweep takes it over once the database is back and ends it from
what is stored.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from conversation_service.messages.repository import MessageRepository
from conversation_service.messages.schemas import message_frame_data
from conversation_service.realtime.frames import FrameData, MessageCompleted, MessageCreated, MessageError
from conversation_service.realtime.publisher import FramePublisher
from conversation_service.replies.endings import (
    REPLY_NOT_SAVED,
    Completed,
    Ending,
    Failed,
    Stopped,
    status_of,
)
from conversation_service.turns.leases import TurnLeftRunning
from shared.fastpath.deferred import DeferredWrite
from shared.transactions import Transactions

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Reply:
    """The assistant message that answers ``in_reply_to`` (the user message, whose turn it is)."""

    conversation_id: str
    message_id: str
    in_reply_to: str
    path: str  # "agent" or "direct_llm": what answered it
    agent_session_id: str | None = None
    # The seq of its message.created frame: frames of the reply are those from there on (0: any).
    since_seq: int = 0
    # Whether its message.created frame was shown (a reply ended before it opened was not).
    announced: bool = True


@dataclass(frozen=True, slots=True)
class Extras:
    """What an ending stores and shows besides the message's own end."""

    metadata: dict[str, Any] | None = None  # the message's agent metadata (None: as it is)
    also: Callable[[AsyncSession], Awaitable[None]] | None = None  # more writes, in the same transaction
    frames: tuple[FrameData, ...] = field(default=())  # shown after the end frame


class ReplyEnder:
    def __init__(self, transactions: Transactions, publisher: FramePublisher) -> None:
        self._tx = transactions
        self._publisher = publisher

    async def end(
        self, reply: Reply, ending: Ending, *, record: DeferredWrite | None = None,
        extras: Callable[[Ending], Extras] | None = None,
    ) -> Ending:
        """Store and show how ``reply`` ended; returns the ending as it was stored (``Failed`` when
        frames of the reply could not be saved). ``extras``: what else the ending stores and shows,
        given the ending as it stands then."""
        try:
            if record is not None:
                await record.done()
            if isinstance(ending, (Completed, Stopped)) and not await self._publisher.durable(
                reply.conversation_id, reply.since_seq
            ):
                log.error("frames of a reply could not be saved; it ends failed", extra={"message_id": reply.message_id})
                ending = Failed(REPLY_NOT_SAVED, ending.content)
            more = extras(ending) if extras is not None else Extras()
            created = await self._tx.run(lambda session: self._store(session, reply, ending, more))
            await self._show(reply, ending, more, announce=created if not reply.announced else None)
        except TurnLeftRunning:
            raise
        except Exception as error:
            raise TurnLeftRunning(f"could not end reply {reply.message_id}") from error
        return ending

    async def _store(self, session: AsyncSession, reply: Reply, ending: Ending, more: Extras):
        created = await MessageRepository(session).end_reply(
            reply.message_id, conversation_id=reply.conversation_id, content=ending.content,
            status=status_of(ending).value, agent_metadata=more.metadata,
            new_metadata={"path": reply.path, "in_reply_to": reply.in_reply_to},
            agent_session_id=reply.agent_session_id,
        )
        if more.also is not None:
            await more.also(session)
        return created

    async def show_end(self, reply: Reply, ending: Ending) -> None:
        """Show an end that is stored already (its frame was lost with the replica that stored it)."""
        try:
            await self._show(reply, ending, Extras(), announce=None)
        except TurnLeftRunning:
            raise
        except Exception as error:
            raise TurnLeftRunning(f"could not show the end of reply {reply.message_id}") from error

    async def _show(self, reply: Reply, ending: Ending, more: Extras, *, announce) -> None:
        cid = reply.conversation_id
        frames: list[FrameData] = []
        if announce is not None:
            frames.append(MessageCreated(message_frame_data(announce)))
        frames.append(end_frame(reply.message_id, ending))
        frames.extend(more.frames)
        last = None
        for i, data in enumerate(frames):
            last = await self._publisher.emit(cid, data, boundary=i == len(frames) - 1)
        assert last is not None
        if not await self._publisher.durable(cid, last.seq):
            raise TurnLeftRunning(f"the end of reply {reply.message_id} could not be saved")


def end_frame(message_id: str, ending: Ending) -> MessageCompleted | MessageError:
    """The frame that ends a message on every client: ``message.completed`` or ``message.error``."""
    if isinstance(ending, (Completed, Stopped)):
        return MessageCompleted(message_id, ending.content, status_of(ending).value)
    reason = ending.reason
    return MessageError(message_id, reason.code, reason.text, ending.content, reason.retryable)
