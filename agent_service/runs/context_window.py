"""The prompt of a model call: the part of the run's transcript that fits the profile's context.

A session keeps its whole transcript and every new message appends to it, so a conversation that
goes on long enough outgrows any model's context; stopping it then would make the chat unusable
for good. Each model call therefore sends a window of the transcript instead (the stored
transcript stays whole):

- always the leading system messages (the profile's prompt, a history summary the caller sent)
  and the run's recalled memory;
- then the most recent turns that fit, the oldest whole turns dropped first. A turn is a user
  message and everything after it up to the next one (the assistant's tool calls, their results,
  its answer), so a tool call never travels without its result, and the window never opens on a
  tool result whose call was dropped (nor on one a malformed history left without its call);
- the current turn (the latest user message and every step taken on it, across ASK_USER pauses) is
  never cut: when it alone does not fit, the run ends with TOKEN_LIMIT_EXCEEDED.

The budget is the profile's ``max_context_tokens`` less the answer's ``max_tokens``, the tool
definitions sent with every call, and a margin for what the count does not see (call ids, the
provider's framing).

This runs before every model call, so it costs as little as it can: while the UTF-8 length of the
whole prompt is within the budget (a byte-level BPE token covers at least one byte) nothing is
tokenized; past that, each message is counted once per run (cached by identity), newest first and
only as far back as the window reaches. The run's first count, which may cover a whole budget's
worth of text, runs off the event loop; a later step counts only the messages it added and leaves
out as many of the oldest turns as they need room for (~15 us a step, not a pass over the window).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from agent_service.profiles.schemas import Profile
from agent_service.runs.state import Failed, RunState, as_text
from shared.llm.base import LLMMessage, ToolSpec
from shared.protocol import ErrorCode
from shared.tokens import TOKENS_PER_MESSAGE, TOKENS_PER_REPLY, count_message_tokens, count_tokens

# Tokens kept free for what the count does not see: tool call ids, the provider's own framing.
MARGIN_TOKENS = 64
# Messages new since the last count longer than this (about 1 ms of tokenizer) are counted in a
# worker thread, not on the event loop every run's stream shares.
INLINE_COUNT_CHARS = 16_384


def message_tokens(message: LLMMessage) -> int:
    """Prompt tokens of one message: its text and the tool calls it carries."""
    tokens = count_message_tokens(message.role, message.content)
    for call in message.tool_calls:
        tokens += count_tokens(call.name) + count_tokens(as_text(call.arguments))
    if message.name:
        tokens += count_tokens(message.name)
    return tokens


def message_bytes(message: LLMMessage) -> int:
    """An upper bound of ``message_tokens``: each token covers at least one byte of the text."""
    size = TOKENS_PER_MESSAGE + len(message.role) + len(message.content.encode())
    for call in message.tool_calls:
        size += len(call.name.encode()) + len(as_text(call.arguments).encode())
    if message.name:
        size += len(message.name.encode())
    return size


class ContextWindow:
    """The prompts of one run. ``prompt`` returns the messages of the next model call, or the
    ``Failed`` outcome when even the current turn does not fit."""

    def __init__(self, profile: Profile, specs: Sequence[ToolSpec] = ()) -> None:
        self.profile = profile
        limit = profile.max_context_tokens
        self.budget = None if limit is None else limit - (profile.max_tokens or 0) - MARGIN_TOKENS
        self._specs = [as_text(asdict(spec)) for spec in specs]
        self._spec_bytes = sum(len(spec.encode()) for spec in self._specs)
        self._spec_tokens: int | None = None
        self._costs: dict[int, tuple[LLMMessage, int]] = {}
        self._counted = 0  # transcript length at the last count
        self._over_bound = False  # the prompt passed the byte bound once: it only grows in a run
        self._last: _Fit | None = None

    async def prompt(self, state: RunState) -> list[LLMMessage] | Failed:
        transcript = state.transcript
        lead_end = next((i for i, m in enumerate(transcript) if m.role != "system"), len(transcript))
        lead = transcript[:lead_end] + state.context
        if self.budget is None or (not self._over_bound and self._within_by_bytes(lead, transcript[lead_end:])):
            return lead + _without_orphans(transcript[lead_end:])
        self._over_bound = True
        fresh = transcript[self._counted :]
        self._counted = len(transcript)
        if not self._costs or sum(len(m.content) for m in fresh) > INLINE_COUNT_CHARS:
            return await asyncio.to_thread(self._fit, lead, transcript, lead_end)
        return self._fit(lead, transcript, lead_end)

    def _within_by_bytes(self, lead: list[LLMMessage], rest: list[LLMMessage]) -> bool:
        assert self.budget is not None
        bound = TOKENS_PER_REPLY + self._spec_bytes
        for message in (*lead, *rest):
            bound += message_bytes(message)
            if bound > self.budget:
                return False
        return True

    def _fit(self, lead: list[LLMMessage], transcript: list[LLMMessage], lead_end: int) -> list[LLMMessage] | Failed:
        assert self.budget is not None
        last = self._last
        if last is not None and _appended_within_turn(transcript, last):
            # The run added steps to its turn: the window only loses its oldest turns, as many as
            # the new messages need room for (the same as fitting afresh, in O(new + left out)).
            current, start = last.current, last.start
            needed = last.needed + self._tokens(transcript[last.length :])
            while needed > self.budget and start < current:
                end = _next_turn(transcript, start, current)
                needed -= self._tokens(_without_orphans(transcript[start:end]))
                start = end
        else:
            current = _turn_start(transcript, len(transcript), lead_end)
            needed = TOKENS_PER_REPLY + self._tools_tokens() + self._tokens(lead)
            needed += self._tokens(_without_orphans(transcript[current:]))
            start = current
            while start > lead_end:
                turn_start = _turn_start(transcript, start, lead_end)
                cost = self._tokens(_without_orphans(transcript[turn_start:start]))
                if needed + cost > self.budget:
                    break
                needed += cost
                start = turn_start
        if needed > self.budget:
            return Failed(ErrorCode.TOKEN_LIMIT_EXCEEDED, self._too_long(needed))
        self._last = _Fit(len(transcript), transcript[-1], current, start, needed)
        return lead + _without_orphans(transcript[start:current]) + _without_orphans(transcript[current:])

    def _tokens(self, messages: Sequence[LLMMessage]) -> int:
        total = 0
        for message in messages:
            cached = self._costs.get(id(message))
            if cached is None or cached[0] is not message:
                cached = self._costs[id(message)] = (message, message_tokens(message))
            total += cached[1]
        return total

    def _tools_tokens(self) -> int:
        if self._spec_tokens is None:
            self._spec_tokens = sum(count_tokens(spec) for spec in self._specs)
        return self._spec_tokens

    def _too_long(self, needed: int) -> str:
        p = self.profile
        return (
            f"this message and the steps taken on it need {needed} prompt tokens; the profile leaves "
            f"{self.budget} (max_context_tokens {p.max_context_tokens} less max_tokens {p.max_tokens or 0} "
            f"and a margin of {MARGIN_TOKENS})"
        )


@dataclass(frozen=True, slots=True)
class _Fit:
    """The last window: the transcript's length and last message then, where its current turn and
    its earliest kept turn start, and its tokens."""

    length: int
    tail: LLMMessage
    current: int
    start: int
    needed: int


def _appended_within_turn(transcript: list[LLMMessage], last: _Fit) -> bool:
    """True when ``transcript`` is the last window's with messages appended to its current turn."""
    if len(transcript) < last.length or transcript[last.length - 1] is not last.tail:
        return False
    return all(m.role != "user" for m in transcript[last.length :])


def _next_turn(transcript: list[LLMMessage], start: int, current: int) -> int:
    """Where the turn after the one at ``start`` begins (at most ``current``)."""
    return next((i for i in range(start + 1, current) if transcript[i].role == "user"), current)


def _turn_start(transcript: list[LLMMessage], end: int, lead_end: int) -> int:
    """Where the turn that ends before ``end`` starts: its user message, or the first message after
    the leading system ones when no user message comes before ``end``."""
    for i in range(end - 1, lead_end - 1, -1):
        if transcript[i].role == "user":
            return i
    return lead_end


def _without_orphans(messages: list[LLMMessage]) -> list[LLMMessage]:
    """``messages`` without the tool results at their start, which answer no call in the window."""
    first = next((i for i, m in enumerate(messages) if m.role != "tool"), len(messages))
    return messages[first:]
