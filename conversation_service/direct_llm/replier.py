"""``DirectLLMReplier``: stream the provider's reply to a user message as frames.

``message.created`` (assistant message, status streaming), ``message.delta`` per chunk (the
model's deltas that arrived within ``stream_coalesce_ms`` of each other: ``shared.fastpath.coalesce``),
``message.completed`` with the full text. The message row is written twice in all: created, then
its final content once; the chunks live only in the frames (group-committed). An LLM failure ends
in a ``message.error`` frame and the message marked ``error``: never silence. A stop by the user
(``ReplyStops``) ends it ``stopped``, with the text streamed so far and a ``message.completed``
whose ``status`` says so.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from conversation_service.db.models import Conversation, Message, MessageRole, MessageStatus
from conversation_service.messages.repository import MessageRepository
from conversation_service.messages.schemas import message_frame_data
from conversation_service.metrics import DirectReplyMetrics
from conversation_service.realtime.frames import AgentWaiting, MessageCreated, MessageDelta, Notice
from conversation_service.realtime.publisher import FramePublisher
from conversation_service.replies.ender import Reply, ReplyEnder
from conversation_service.replies.endings import (
    LLM_ERROR,
    LLM_UNAVAILABLE,
    Completed,
    Failed,
    Reason,
    Stopped,
    status_of,
)
from conversation_service.turns.repository import TurnRepository
from conversation_service.turns.stops import ReplyStops
from shared.fastpath.coalesce import aclose_stream, coalesce
from shared.fastpath.fair_share import fair_share
from shared.llm.base import (
    DELTA_TYPES,
    CompletionOptions,
    LLMDone,
    LLMError,
    LLMMessage,
    LLMProvider,
    TextDelta,
)
from shared.logging import conversation_id_var
from shared.protocol import utcnow
from shared.rate_limit import RateLimited, RateLimiter, Wait
from shared.storable import storable
from shared.tokens import count_messages_tokens, count_tokens
from shared.transactions import Transactions

log = logging.getLogger(__name__)

USER_FACING_LLM_ERROR = LLM_UNAVAILABLE.text
USER_FACING_RATE_LIMITED = "Your organisation has reached its usage limit."


class DirectLLMReplier:
    def __init__(
        self,
        transactions: Transactions,
        provider: LLMProvider,
        publisher: FramePublisher,
        metrics: DirectReplyMetrics,
        replies: ReplyEnder,
        *,
        history_messages: int,
        system_prompt: str,
        max_tokens: int,
        limiter: RateLimiter | None = None,
        model: str = "",
        stops: ReplyStops | None = None,
        stream_coalesce_ms: float = 0.0,
    ) -> None:
        self._coalesce_ms = stream_coalesce_ms
        self._stops = stops or ReplyStops()
        self._tx = transactions
        self._replies = replies
        self._provider = provider
        self._publisher = publisher
        self._metrics = metrics
        self._history_messages = history_messages
        self._system_prompt = system_prompt
        self._options = CompletionOptions(max_tokens=max_tokens)
        # The rate limits the Agent Service enforces, on this path's own calls, in ``model``'s budget.
        self._limiter = limiter
        self._model = model or provider.name

    async def build_prompt(self, conversation_id: str) -> list[LLMMessage]:
        async def read(session: AsyncSession) -> list[Message]:
            return await MessageRepository(session).recent_complete(conversation_id, self._history_messages)

        history = await self._tx.run(read)
        prompt = [LLMMessage(role="system", content=self._system_prompt)]
        prompt.extend(LLMMessage(role=m.role, content=m.content) for m in history)  # type: ignore[arg-type]
        return prompt

    async def reply(
        self,
        conversation: Conversation,
        user_message: Message,
        *,
        notice: tuple[str, str] | None = None,
        agent_metadata: dict | None = None,
    ) -> Message:
        """Answer ``user_message``; ``notice`` = (code, text) is shown first (e.g. a fallback)."""
        conversation_id = conversation.id
        token = conversation_id_var.set(conversation_id)
        try:
            if notice is not None:
                await self._publisher.emit(conversation_id, Notice(*notice))
            prompt = await self.build_prompt(conversation_id)
            metadata = {"path": "direct_llm", "in_reply_to": user_message.id, **(agent_metadata or {})}
            async def open_reply(session: AsyncSession) -> Message:
                created = await MessageRepository(session).create(
                    conversation_id=conversation_id, role=MessageRole.ASSISTANT.value, content="",
                    status=MessageStatus.STREAMING.value, agent_metadata=metadata,
                )
                # The turn's reply is this message: a takeover ends it visibly if this process dies.
                await TurnRepository(session).set_direct_reply(user_message.id, created.id)
                return created

            message = await self._tx.run(open_reply)
            created = await self._publisher.emit(conversation_id, MessageCreated(message_frame_data(message)))
            reply = Reply(conversation_id, message.id, user_message.id, "direct_llm", since_seq=created.seq)
            parts: list[str] = []  # the text streamed so far: what a stop keeps
            with self._stops.watch(user_message.id) as watch:
                try:
                    message = await self._answer(conversation, reply, message, prompt, parts)
                except asyncio.CancelledError:
                    if not watch.stopping:
                        raise  # a shutdown: the turn stays running, for a takeover
                    current = asyncio.current_task()
                    if current is not None:
                        current.uncancel()
                    return await self._end(reply, message, Stopped("".join(parts)))
            if self._limiter is not None and message.content:
                await self._limiter.record_output(conversation.org_id, self._model, count_tokens(message.content))
            return message
        finally:
            conversation_id_var.reset(token)

    async def _answer(self, conversation: Conversation, reply: Reply, message: Message, prompt: list[LLMMessage],
                      parts: list[str]) -> Message:
        try:
            await self._take_budget(conversation, message, prompt)
        except RateLimited as exc:
            text = f"{USER_FACING_RATE_LIMITED} Please try again in {math.ceil(exc.retry_after_s)} s."
            return await self._end(reply, message, Failed(Reason("rate_limited", text), ""), outcome="rate_limited")
        return await self._stream(reply, message, prompt, parts)

    async def _stream(self, reply: Reply, message: Message, prompt: list[LLMMessage], parts: list[str]) -> Message:
        started = time.perf_counter()
        first = True
        # What arrived together is one frame, one fan-out message and one WebSocket write.
        source = coalesce(self._provider.stream(prompt, options=self._options), self._coalesce_ms, DELTA_TYPES)
        try:
            # Deltas of one network read come without a wait and each frame is written inside
            # emit: fair_share pauses between them, so other conversations are not held behind a burst.
            async for event in fair_share(source):
                if isinstance(event, TextDelta) and event.text:
                    if first:
                        self._metrics.first_chunk_seconds.observe(time.perf_counter() - started)
                        first = False
                    text = storable(event.text)
                    parts.append(text)
                    await self._publisher.emit(reply.conversation_id, MessageDelta(message.id, text))
                elif isinstance(event, LLMDone):
                    break
        except Exception as exc:  # the provider or the network failed: the user must see it
            reason = LLM_UNAVAILABLE if isinstance(exc, LLMError) and exc.retryable else LLM_ERROR
            if not isinstance(exc, LLMError):
                log.exception("direct reply failed", extra={"message_id": message.id})
            else:
                log.warning("direct reply failed", extra={"message_id": message.id, "error_type": type(exc).__name__})
            return await self._end(reply, message, Failed(reason, "".join(parts)))
        finally:
            # A stop leaves the model's stream mid-answer: close its connection now, not at GC.
            await aclose_stream(source)
        return await self._end(reply, message, Completed("".join(parts)))

    async def _end(self, reply: Reply, message: Message, ending, *, outcome: str | None = None) -> Message:
        """End the reply (``ReplyEnder``): complete, stopped by the user with its text so far, or an
        error the user sees, keeping what was streamed."""
        # Counted as decided, before its frames go out (a client that sees the end sees it counted).
        if isinstance(ending, Stopped):
            self._metrics.replies["stopped"].inc()
            log.info("direct reply stopped by the user", extra={"message_id": message.id})
        elif isinstance(ending, Completed):
            self._metrics.replies["ok"].inc()
        else:
            self._metrics.replies[outcome or "error"].inc()
        ended = await self._replies.end(reply, ending)
        message.content, message.status = ended.content, status_of(ended).value
        return message

    async def _take_budget(self, conversation: Conversation, message: Message, prompt: list[LLMMessage]) -> None:
        """Wait for room in the organisation's rate limits; the page shows the wait as for the agent's
        (``agent.waiting``: the same countdown on the reply's message)."""
        if self._limiter is None:
            return

        async def on_wait(wait: Wait) -> None:
            until = utcnow() + timedelta(seconds=wait.wait_s)
            await self._publisher.emit(conversation.id, AgentWaiting(
                message.id, wait.reason, wait.wait_s, wait.dimension.value, until.isoformat()))

        async def input_tokens() -> int:
            return await asyncio.to_thread(count_messages_tokens, [(m.role, m.content) for m in prompt])

        await self._limiter.acquire(conversation.org_id, self._model, input_tokens, on_wait)
