"""The reply seam: what happens after a user message is stored.

``messages.service`` calls the app's ``ReplyDispatcher`` with the stored message. A dispatcher
decides the route without any network call, starts the reply as a background task and returns the
decision at once, so the POST answers 202 before the first token. ``DirectReplyDispatcher`` sends
every message to the direct LLM; a routing dispatcher (agent delegation) replaces it by
configuration of the app.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from conversation_service.db.models import Conversation, Message

if TYPE_CHECKING:
    from conversation_service.direct_llm.replier import DirectLLMReplier
    from conversation_service.tasks import TaskSupervisor


class RouteDecisionLike(Protocol):
    target: str
    reason: str


@dataclass(frozen=True, slots=True)
class RouteDecision:
    target: str  # "agent" | "direct_llm"
    reason: str


class ReplyDispatcher(Protocol):
    async def dispatch(self, conversation: Conversation, user_message: Message) -> RouteDecisionLike: ...


class DirectReplyDispatcher:
    def __init__(self, replier: DirectLLMReplier, tasks: TaskSupervisor) -> None:
        self._replier = replier
        self._tasks = tasks

    async def dispatch(self, conversation: Conversation, user_message: Message) -> RouteDecision:
        self._tasks.spawn(
            self._replier.reply(conversation, user_message), name=f"direct-reply:{user_message.id}"
        )
        return RouteDecision(target="direct_llm", reason="direct_default")
