"""``AgentTargets``: who answers a delegated message, the Agent Service or one of the A2A agents.

A target is named by its ``A2A_AGENTS`` name; ``None`` is the Agent Service. Which one a message goes
to: the agent the user named (``/agent <name> ...``), else the one the conversation already talks to
(its open agent session), else its organisation's (``A2A_ORG_AGENTS``), else the deployment's
(``A2A_DEFAULT_AGENT``), else the Agent Service. Each target has its own circuit breaker: an A2A
agent that is down sends its messages to the direct LLM without touching the others.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from conversation_service.a2a_agents.target import A2ATarget
from conversation_service.agent_client import AgentServiceClient
from conversation_service.agent_client.errors import AgentConflictError, AgentStreamError
from conversation_service.db.models import ConversationAgentSession
from conversation_service.settings.a2a_agents import A2AAgentsSettings
from shared.breaker import CircuitBreaker
from shared.protocol import ExecuteRequest

# Marks "no open session": distinct from an open session with the Agent Service (None).
NO_SESSION = object()


class AgentTargets:
    def __init__(
        self, client: AgentServiceClient, breaker: CircuitBreaker, a2a: Mapping[str, A2ATarget],
        settings: A2AAgentsSettings, new_breaker: Callable[[str], CircuitBreaker],
    ) -> None:
        self.client = client
        self._breaker = breaker
        self._a2a = dict(a2a)
        self._settings = settings
        self._breakers = {name: new_breaker(name) for name in self._a2a}

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._a2a)

    def choose(self, named: str | None, org_id: str | None, open_agent: object = NO_SESSION) -> str | None:
        """The target of a message: ``named`` by the user, else the open session's, else the default."""
        if named is not None:
            return named
        if open_agent is not NO_SESSION:
            return open_agent if isinstance(open_agent, str) and open_agent in self._a2a else None
        return self._settings.agent_for(org_id)

    @property
    def a2a_breakers(self) -> Mapping[str, CircuitBreaker]:
        return self._breakers

    def breaker(self, name: str | None) -> CircuitBreaker:
        return self._breakers.get(name, self._breaker)

    def a2a(self, name: str) -> A2ATarget:
        target = self._a2a.get(name)
        if target is None:
            # A session of an agent since removed from A2A_AGENTS: nothing to talk to any more.
            raise AgentStreamError(f"the A2A agent {name!r} is no longer configured",
                                   user_message=f"The agent {name} is no longer available here.")
        return target

    def execute(self, row: ConversationAgentSession, request: ExecuteRequest, *, idempotency_key: str):
        """The turn's stream: the Agent Service's execute, or the A2A agent's message."""
        if row.agent_name is None:
            return self.client.execute_agent(request, idempotency_key=idempotency_key)
        task_id = row.a2a_task_id if request.answer is not None else None
        return self.a2a(row.agent_name).execute_agent(request, idempotency_key=idempotency_key, task_id=task_id)

    def resume(self, row: ConversationAgentSession | None, agent_session_id: str, *, last_seq: int, delivered: str):
        """A taken-over turn's stream, after what its stored frames show."""
        if row is None or row.agent_name is None:
            return self.client.stream_events(agent_session_id, last_event_id=last_seq)
        if not row.a2a_task_id:
            raise AgentStreamError("the A2A task of the taken-over turn is not known")
        return self.a2a(row.agent_name).resume(agent_session_id, row.a2a_task_id, last_seq=last_seq,
                                               delivered=delivered)

    async def cancel(self, row: ConversationAgentSession | None, agent_session_id: str) -> None:
        """Stop the run (``CancelTask`` for an A2A agent); nothing when it had ended already."""
        if row is None or row.agent_name is None:
            try:
                await self.client.cancel(agent_session_id)
            except AgentConflictError:
                pass  # the run ended meanwhile: its own end reaches the page
            return
        if row.a2a_task_id:
            await self.a2a(row.agent_name).cancel(row.a2a_task_id)
