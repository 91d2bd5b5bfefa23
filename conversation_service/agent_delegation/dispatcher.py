"""The routing ``ReplyDispatcher``: decides per message between the agent and the direct LLM.

Order of checks for a stored user message:
1. a pending ASK_USER question in the conversation: the message is its answer (configurable);
   an expired question is expired first (the user is told) and the message starts afresh;
2. the ``MessageRouter`` (no network call): explicit /agent or @agent, an open agent session,
   intent keywords, per-org/user switches, and the circuit breaker's state;
3. the reply starts as a background task; the decision is returned for the 202 at once.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import async_sessionmaker

from conversation_service.agent_delegation.breaker import CircuitBreaker
from conversation_service.agent_delegation.repository import InteractionRepository
from conversation_service.agent_delegation.service import AgentDelegation, TurnRequest
from conversation_service.agent_delegation.turns import ClaimReadAhead
from conversation_service.agent_sessions.repository import AgentSessionRepository
from conversation_service.db.models import AgentSessionStatus, Conversation, Message
from conversation_service.db.repository import unit_of_work
from conversation_service.direct_llm.replier import DirectLLMReplier
from conversation_service.routing.router import MessageRouter
from conversation_service.routing.schemas import RouteDecision, RouteReason, RouteTarget
from conversation_service.tasks import TaskSupervisor
from shared.protocol import Answer, utcnow


class AgentReplyDispatcher:
    """The app's ``ReplyDispatcher`` (``messages.service``)."""

    def __init__(
        self,
        *,
        sessionmaker: async_sessionmaker,
        router: MessageRouter,
        breaker: CircuitBreaker,
        delegation: AgentDelegation,
        replier: DirectLLMReplier,
        tasks: TaskSupervisor,
    ) -> None:
        self._sessionmaker = sessionmaker
        self._router = router
        self._breaker = breaker
        self._delegation = delegation
        self._replier = replier
        self._tasks = tasks

    async def dispatch(self, conversation: Conversation, user_message: Message) -> RouteDecision:
        turns = self._delegation.turns.get(conversation.id)
        registered_before, idle = turns.registered, turns.idle
        decision: RouteDecision | None = None
        read_ahead: ClaimReadAhead | None = None
        async with unit_of_work(self._sessionmaker) as session:
            open_row = await AgentSessionRepository(session).get_open_for_conversation(conversation.id)
            pending = None
            if open_row is not None and open_row.status == AgentSessionStatus.AWAITING_USER.value:
                pending = await InteractionRepository(session).pending_for_conversation(conversation.id)
            elif open_row is not None:
                decision = self._route(conversation, user_message, has_active_session=True)
                if decision.target is RouteTarget.AGENT and idle:
                    # The turn would claim this session and read this history in a transaction of
                    # its own; read it here, in this one (see ``turns``).
                    history = await self._delegation.read_history(session, user_message)
                    read_ahead = ClaimReadAhead(open_row, history, turns, registered_before)

        if pending is not None and self._delegation.settings.ask_user_chat_message_is_answer:
            if pending.expires_at > utcnow():
                async with unit_of_work(self._sessionmaker) as session:
                    claimed = await InteractionRepository(session).mark_answered(pending.question_id, user_message.id)
                if claimed:
                    answer = Answer(question_id=pending.question_id, text=user_message.content)
                    self._delegation.start(conversation, user_message, TurnRequest(
                        text=user_message.content, answer=answer, route_reason=RouteReason.PENDING_QUESTION.value))
                    return RouteDecision(target=RouteTarget.AGENT, reason=RouteReason.PENDING_QUESTION,
                                         message=user_message.content)
            else:
                await self._delegation.expire_question(pending)
                open_row = None  # the session was abandoned: this message starts a fresh one

        if decision is None:
            decision = self._route(conversation, user_message, has_active_session=open_row is not None)
        if decision.target is RouteTarget.AGENT:
            self._delegation.start(
                conversation, user_message, TurnRequest(text=decision.message, route_reason=decision.reason.value),
                read_ahead,
            )
            return decision
        notice = ("agent_unavailable", decision.notice) if decision.notice else None
        self._tasks.spawn(
            self._replier.reply(conversation, user_message, notice=notice,
                                agent_metadata={"route_reason": decision.reason.value}),
            name=f"direct-reply:{user_message.id}",
        )
        return decision

    def _route(self, conversation: Conversation, user_message: Message, *, has_active_session: bool) -> RouteDecision:
        return self._router.route(
            user_message.content,
            user_id=conversation.owner_id,
            org_id=conversation.org_id,
            has_active_session=has_active_session,
            agent_available=self._breaker.allows_calls,
        )
