"""``A2ATarget``: an A2A agent behind the interface of ``AgentServiceClient.execute_agent``.

The turn hands it the ``ExecuteRequest`` it would send the Agent Service; the target sends the A2A
message that means the same (the text, or the answer to the agent's question with that task's
``taskId``, in the conversation's ``contextId``) and returns a stream of agent events
(``A2ATaskStream``). What the Agent Service keeps itself (the history, the profile) an A2A agent
keeps by ``contextId``: only the new message is sent.
"""

from __future__ import annotations

from typing import Any

from conversation_service.a2a_agents.client import A2AAgentClient
from conversation_service.a2a_agents.fold import TaskFold
from conversation_service.a2a_agents.stream import A2ATaskStream
from conversation_service.agent_client.errors import AgentConflictError
from shared.protocol import ExecuteRequest


class A2ATarget:
    def __init__(self, client: A2AAgentClient) -> None:
        self.client = client

    @property
    def name(self) -> str:
        return self.client.name

    def __repr__(self) -> str:
        return f"<A2ATarget {self.name}>"

    def execute_agent(
        self, request: ExecuteRequest, *, idempotency_key: str, task_id: str | None = None,
    ) -> A2ATaskStream:
        """Send the turn's message (``task_id``: the task whose question ``request.answer`` answers);
        the stream opens on ``start``. ``idempotency_key`` is the message's ``messageId``: an agent
        that deduplicates by it joins a retried message to its first try."""
        answer = request.answer
        text = request.message if answer is None else answer.text
        message: dict[str, Any] = {"messageId": idempotency_key, "role": "ROLE_USER", "parts": [{"text": text}]}
        if request.session_id:
            message["contextId"] = request.session_id
        if answer is not None and task_id:
            message["taskId"] = task_id
        metadata = None
        if self.client.config.forward_user:
            user = request.user_context
            metadata = {"userId": user.user_id, **({"orgId": user.org_id} if user.org_id else {})}
        fold = TaskFold(context_id=request.session_id, task_id=message.get("taskId"),
                        answered=answer.question_id if answer is not None else None)
        return A2ATaskStream(self.client, fold, message=message, metadata=metadata)

    def resume(self, context_id: str, task_id: str, *, last_seq: int, delivered: str) -> A2ATaskStream:
        """The task of a turn taken over: subscribed to again, sending on what ``delivered`` lacks."""
        return A2ATaskStream(self.client, TaskFold(delivered=delivered, last_seq=last_seq, context_id=context_id,
                                                   task_id=task_id))

    async def cancel(self, task_id: str) -> bool:
        """``CancelTask``; False when the task had ended already (its own end reaches the page)."""
        try:
            await self.client.cancel(task_id)
        except AgentConflictError:
            return False
        return True
