"""Everything the lifespan creates, reachable from requests as ``app.state.services``."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from conversation_service.agent_client import AgentServiceClient
from conversation_service.agent_delegation.breaker import CircuitBreaker
from conversation_service.agent_delegation.cleanup import QuestionExpiryJob
from conversation_service.agent_delegation.dispatcher import AgentReplyDispatcher
from conversation_service.agent_delegation.health import AgentHealthMonitor
from conversation_service.agent_delegation.service import AgentDelegation
from conversation_service.direct_llm.replier import DirectLLMReplier
from conversation_service.messages.dispatch import ReplyDispatcher
from conversation_service.metrics import ConversationMetrics
from conversation_service.realtime.hub import Hub
from conversation_service.realtime.publisher import FramePublisher
from conversation_service.settings import ConversationSettings
from conversation_service.tasks import TaskSupervisor
from shared.llm.base import LLMProvider


@dataclass
class ServiceState:
    settings: ConversationSettings
    engine: AsyncEngine
    sessionmaker: async_sessionmaker
    http_client: httpx.AsyncClient
    llm: LLMProvider
    hub: Hub
    publisher: FramePublisher
    tasks: TaskSupervisor
    replier: DirectLLMReplier
    dispatcher: ReplyDispatcher
    metrics: ConversationMetrics
    agent_client: AgentServiceClient
    breaker: CircuitBreaker
    delegation: AgentDelegation
    agent_dispatcher: AgentReplyDispatcher
    agent_health: AgentHealthMonitor
    question_expiry: QuestionExpiryJob
