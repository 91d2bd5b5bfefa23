"""Replaying a dead letter: its message delegated to the agent again, by the running service.

The replay runs in the ConversationService that serves the conversation, not in the operator's
process: its frames then get seqs from the same allocator as every other frame of the
conversation (in-process without Redis: a second process would hand out seqs the service also
hands out) and reach the clients connected to it live, and its turn waits behind the
conversation's turns under way. The turn is the chat's own (``AgentDelegation.run``): the same
history window, the same idempotency key as the message's first try (``msg-<message id>``), so the
Agent Service joins the run that try started, if it did, instead of starting a second one.

A letter is claimed before anything runs (``replayed_at``, one conditional UPDATE): of two
operators replaying it at once, one replays and the other is refused, and a letter is never
replayed twice. The outcome is recorded when the turn has ended, also if the operator's
connection went away meanwhile.

The message's turn is reopened with the claim and the replay runs under its lease
(``TurnLeases.hold``), as a chat turn does. When the replayed turn fails and ending its reply fails
too (the database is down, most likely: ``TurnLeftRunning``), the reply is not left streaming in
silence: the turn stays running, and a sweep, this replica's too, takes it over once its lease runs
out and ends the reply (``agent_delegation.takeover``); the request answers 503 saying so, and
the letter's outcome is ``left_running`` if it can still be written. Without the lease nothing
would ever end that reply.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import async_sessionmaker

from conversation_service.agent_delegation.repository import DeadLetterRepository
from conversation_service.agent_delegation.schemas import TurnRequest
from conversation_service.agent_delegation.service import AgentDelegation
from conversation_service.db.models import Conversation, DeadLetter, Message, Turn, utcnow
from conversation_service.errors import Conflict, InvalidInput, NotFound, Unavailable
from conversation_service.tasks import TaskSupervisor
from conversation_service.turns.leases import TurnLeases, TurnLeftRunning
from shared.transactions import transaction

log = logging.getLogger(__name__)

ROUTE_REASON = "dead_letter_replay"
# The outcome recorded when the replayed turn could not be ended here (``TurnLeftRunning``).
LEFT_RUNNING = "left_running"
LEFT_RUNNING_DETAIL = ("the replayed turn failed and its reply could not be ended (the database may be down); "
                       "it is left running for the turn lease sweep, which ends the reply")


@dataclass(frozen=True, slots=True)
class ReplayResult:
    id: str
    replayed_at: datetime
    outcome: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "replayed_at": self.replayed_at.isoformat(), "replay_outcome": self.outcome,
                "replay_detail": self.detail}


@dataclass(frozen=True, slots=True)
class _Claimed:
    conversation: Conversation
    message: Message
    text: str
    at: datetime
    linked: str | None = None  # the trace of the message's first delegation: the replay links to it
    agent: str | None = None  # the A2A agent the letter's request went to (None: the Agent Service)


def replay_refusal(letter: DeadLetter) -> str | None:
    """Why ``letter`` cannot be replayed (None: it can)."""
    payload = letter.payload or {}
    if letter.message_id is None or not payload:
        return "the letter holds no request to replay"
    if payload.get("answer_question_id"):
        return "an answer to an agent question cannot be replayed: its question has ended; the user asks again"
    if not isinstance(payload.get("message"), str) or not payload["message"].strip():
        return "the letter holds no message text"
    return None


class DeadLetterReplayer:
    def __init__(
        self, sessionmaker: async_sessionmaker, delegation: AgentDelegation, tasks: TaskSupervisor, leases: TurnLeases,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._leases = leases
        self._delegation = delegation
        self._tasks = tasks

    async def replay(self, letter_id: str) -> ReplayResult:
        """Claim the letter, run its turn to the end, record and return how it ended.

        NotFound: no such letter. Conflict: replayed already (or under way), or the message's reply
        still runs. InvalidInput: not replayable (an answer, or its conversation or message is gone).
        Unavailable: the replayed turn could not be ended here and is left to the lease sweep."""
        claimed = await self._claim(letter_id)
        # In the service's own task: a caller that goes away does not cut the turn or its record.
        task = self._tasks.spawn(self._run(letter_id, claimed), name=f"dead-letter-replay:{letter_id}")
        return await asyncio.shield(task)

    async def _claim(self, letter_id: str) -> _Claimed:
        async with transaction(self._sessionmaker) as session:
            letters = DeadLetterRepository(session)
            letter = await letters.get(letter_id)
            if letter is None:
                raise NotFound("no such dead letter")
            if letter.replayed_at is not None:
                raise Conflict(_already(letter))
            refusal = replay_refusal(letter)
            if refusal is not None:
                raise InvalidInput(refusal)
            conversation = await session.get(Conversation, letter.conversation_id)
            message = await session.get(Message, letter.message_id)
            if conversation is None or message is None:
                raise InvalidInput("the letter's conversation or message no longer exists")
            turn = await session.get(Turn, message.id)
            linked = turn.traceparent if turn is not None else None  # the first delegation's trace
            if not await self._leases.reopen(session, message.id, conversation.id):
                raise Conflict("the message's reply is still streaming; replay the letter once it has ended")
            now = utcnow()
            if not await letters.claim_replay(letter_id, now):
                raise Conflict("this dead letter is being replayed by another request")
            text = letter.payload["message"]
            metadata = letter.payload.get("metadata")
            agent = metadata.get("agent") if isinstance(metadata, dict) else None
        log.info("replaying a dead letter", extra={"dead_letter_id": letter_id, "message_id": message.id})
        return _Claimed(conversation, message, text, now, linked, agent if isinstance(agent, str) else None)

    async def _run(self, letter_id: str, claimed: _Claimed) -> ReplayResult:
        turn = self._delegation.run(
            claimed.conversation, claimed.message, TurnRequest(text=claimed.text, route_reason=ROUTE_REASON,
                                                                agent=claimed.agent)
        )
        try:
            outcome = await self._leases.hold(claimed.message.id, turn, linked=claimed.linked)
        except TurnLeftRunning as error:
            log.error("replayed turn left running for the lease sweep", exc_info=error,
                      extra={"dead_letter_id": letter_id, "message_id": claimed.message.id})
            try:
                async with transaction(self._sessionmaker) as session:
                    await DeadLetterRepository(session).record_replay(letter_id, LEFT_RUNNING, LEFT_RUNNING_DETAIL)
            except Exception:  # the same fault, most likely: the letter keeps "no outcome yet"
                log.exception("could not record a dead letter's replay", extra={"dead_letter_id": letter_id})
            raise Unavailable(LEFT_RUNNING_DETAIL) from error
        async with transaction(self._sessionmaker) as session:
            letters = DeadLetterRepository(session)
            again = [letter for letter in await letters.written_since(claimed.message.id, claimed.at)
                     if letter.id != letter_id]
            detail = "; ".join(f"failed again: dead letter {letter.id} ({letter.error_code})" for letter in again)
            await letters.record_replay(letter_id, outcome, detail)
        log.info("dead letter replayed", extra={"dead_letter_id": letter_id, "outcome": outcome})
        return ReplayResult(letter_id, claimed.at, outcome, detail)


def _already(letter: DeadLetter) -> str:
    assert letter.replayed_at is not None
    state = letter.replay_outcome or "no outcome yet (under way, or the service stopped during the replay)"
    return f"already replayed at {letter.replayed_at.isoformat()}: {state}"
