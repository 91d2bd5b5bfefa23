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

from conversation_service.agent_delegation.schemas import TurnRequest
from conversation_service.agent_delegation.service import AgentDelegation
from conversation_service.agent_delegation.targets import NO_SESSION, AgentTargets
from conversation_service.agent_sessions.repository import AgentSessionRepository
from conversation_service.db.models import AgentSessionStatus, Conversation, ConversationAgentSession, Message
from conversation_service.direct_llm.replier import DirectLLMReplier
from conversation_service.interactions.expiry import QuestionExpiry
from conversation_service.interactions.repository import InteractionRepository
from conversation_service.routing.router import MessageRouter
from conversation_service.routing.schemas import RouteDecision, RouteReason, RouteTarget
from conversation_service.tasks import TaskSupervisor
from conversation_service.turns.leases import TurnLeases
from shared.protocol import Answer, utcnow
from shared.transactions import transaction


class AgentReplyDispatcher:
    """The app's ``ReplyDispatcher`` (``messages.service``)."""

    def __init__(
        self,
        *,
        sessionmaker: async_sessionmaker,
        router: MessageRouter,
        targets: AgentTargets,
        delegation: AgentDelegation,
        expiry: QuestionExpiry,
        replier: DirectLLMReplier,
        tasks: TaskSupervisor,
        leases: TurnLeases,
        chat_message_answers: bool,
    ) -> None:
        self._leases = leases
        self._sessionmaker = sessionmaker
        self._router = router
        self._targets = targets
        self._delegation = delegation
        self._expiry = expiry
        self._replier = replier
        self._tasks = tasks
        # ASK_USER_CHAT_MESSAGE_IS_ANSWER: a chat message sent while a question is pending answers it.
        self._chat_message_answers = chat_message_answers

    async def dispatch(self, conversation: Conversation, user_message: Message) -> RouteDecision:
        prepared = self._delegation.prepare(conversation.id)
        decision: RouteDecision | None = None
        async with transaction(self._sessionmaker) as session:
            open_row = await AgentSessionRepository(session).get_open_for_conversation(conversation.id)
            pending = None
            if open_row is not None and open_row.status == AgentSessionStatus.AWAITING_USER.value:
                pending = await InteractionRepository(session).pending_for_conversation(conversation.id)
            elif open_row is not None:
                decision = self._route(conversation, user_message, open_row)
                if decision.target is RouteTarget.AGENT and decision.agent in (None, open_row.agent_name):
                    await self._delegation.read_ahead(prepared, session, open_row, user_message)

        if pending is not None and self._chat_message_answers:
            if pending.expires_at > utcnow():
                async with transaction(self._sessionmaker) as session:
                    claimed = await InteractionRepository(session).mark_answered(pending.question_id, user_message.id)
                if claimed:
                    answer = Answer(question_id=pending.question_id, text=user_message.content)
                    self._delegation.resume(conversation, user_message, answer,
                                            reason=RouteReason.PENDING_QUESTION.value)
                    return RouteDecision(target=RouteTarget.AGENT, reason=RouteReason.PENDING_QUESTION,
                                         message=user_message.content)
            else:
                await self._expiry.expire(pending)
                open_row = None  # the session was abandoned: this message starts a fresh one

        if decision is None:
            decision = self._route(conversation, user_message, open_row)
        if decision.target is RouteTarget.AGENT:
            self._delegation.start(
                conversation, user_message,
                TurnRequest(text=decision.message, route_reason=decision.reason.value, agent=decision.agent), prepared,
            )
            return decision
        notice = ("agent_unavailable", decision.notice) if decision.notice else None
        self._tasks.spawn(
            self._leases.hold(user_message.id, self._replier.reply(
                conversation, user_message, notice=notice, agent_metadata={"route_reason": decision.reason.value})),
            name=f"direct-reply:{user_message.id}",
        )
        return decision

    def request_of(self, user_message: Message, *, reason: str) -> TurnRequest:
        """What a turn of the accepted ``user_message`` sends to the agent, as dispatching it did:
        its answer to a question, or its text without a leading /agent or @agent."""
        question_id = (user_message.agent_metadata or {}).get("answer_to")
        if question_id:
            answer = Answer(question_id=question_id, text=user_message.content)
            return TurnRequest(text=answer.text, answer=answer, route_reason=reason)
        _explicit, agent, text = self._router.parse(user_message.content)
        return TurnRequest(text=text, route_reason=reason, agent=agent)

    def _route(
        self, conversation: Conversation, user_message: Message, open_row: ConversationAgentSession | None,
    ) -> RouteDecision:
        # The breaker asked is that of the agent the message would go to.
        named = self._router.parse(user_message.content)[1]
        target = self._targets.choose(named, conversation.org_id,
                                      open_row.agent_name if open_row is not None else NO_SESSION)
        return self._router.route(
            user_message.content,
            user_id=conversation.owner_id,
            org_id=conversation.org_id,
            has_active_session=open_row is not None,
            agent_available=self._targets.breaker(target).allows_calls,
        )
