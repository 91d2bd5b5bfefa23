"""What a reply ends as, and the reasons this service gives when it ends one without its answer.

A reply ends once: ``Completed`` (its answer, or the agent's question), ``Stopped`` by the user (its
text so far kept), ``Failed`` (the model, the agent or this service could not answer: the user reads
why and whether trying again may help) or ``Interrupted`` (the stream to it broke: a restart, a lost
connection; always worth trying again). ``ReplyEnder`` stores and shows it.
"""

from __future__ import annotations

from dataclasses import dataclass

from conversation_service.db.models import MessageStatus


@dataclass(frozen=True, slots=True)
class Reason:
    """Why a reply ended without its answer: ``code`` for programs, ``text`` for the user."""

    code: str
    text: str
    retryable: bool = True


@dataclass(frozen=True, slots=True)
class Completed:
    content: str


@dataclass(frozen=True, slots=True)
class Stopped:
    content: str  # the text streamed before the user's stop


@dataclass(frozen=True, slots=True)
class Failed:
    reason: Reason
    content: str = ""  # the text streamed before it failed


@dataclass(frozen=True, slots=True)
class Interrupted:
    reason: Reason
    content: str = ""


Ending = Completed | Stopped | Failed | Interrupted


def status_of(ending: Ending) -> MessageStatus:
    """The stored status of the reply's message."""
    if isinstance(ending, Completed):
        return MessageStatus.COMPLETE
    if isinstance(ending, Stopped):
        return MessageStatus.STOPPED
    return MessageStatus.ERROR


# Reasons of the service's own (the agent's come from its ERROR codes, ``policy.agent_error_reason``).
REPLY_INTERRUPTED = Reason("reply_interrupted", "The reply was interrupted by a server restart. Please try again.")
STREAM_INTERRUPTED = Reason(
    "stream_interrupted", "The connection to the agent was lost before it finished. Please try again."
)
TURN_FAILED = Reason("agent_failed", "The agent could not answer this message. Please try again.")
REPLY_NOT_SAVED = Reason(
    "reply_not_saved",
    "Part of this reply could not be saved (the database was unavailable for too long). Please try again.",
)
LLM_UNAVAILABLE = Reason("llm_unavailable", "Sorry, the assistant could not answer right now. Please try again in a moment.")
LLM_ERROR = Reason("llm_error", LLM_UNAVAILABLE.text)
