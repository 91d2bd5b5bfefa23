"""Windowing strategies: which of a conversation's messages go to the agent verbatim.

Every strategy walks the history newest first and stops at the first message that does not fit:
the window is always a contiguous tail of the conversation, and a message is never cut silently.
The one exception is the newest message when it alone is larger than the whole budget: it is
truncated to fit and says so in its text (and in the stats), because sending no context at all
for a follow-up question would be worse.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from conversation_service.history.tokens import HistoryItem, TokenCounter
from shared.protocol import MAX_CONTENT_CHARS
from shared.tokens import count_tokens, truncate_to_tokens

# Messages counted per batch while walking back: large enough to amortise a worker-thread hop,
# small enough that a budget met early does not tokenize the whole conversation.
COUNT_BATCH = 64
TRUNCATION_MARKER = "\n[message truncated to fit the history budget: {kept} of {total} tokens kept]"


@dataclass(frozen=True, slots=True)
class Window:
    items: list[HistoryItem]  # oldest first
    tokens: int
    truncated: int


def clip_content(item: HistoryItem) -> HistoryItem:
    """Content beyond the wire contract's cap is cut here, visibly, before anything else."""
    if len(item.content) <= MAX_CONTENT_CHARS:
        return item
    marker = "\n[message truncated: too long to send]"
    return HistoryItem(item.id, item.role, item.content[: MAX_CONTENT_CHARS - len(marker)] + marker, True)


async def truncate_item(
    item: HistoryItem, counter: TokenCounter, budget: int
) -> tuple[HistoryItem, int] | None:
    """``item`` cut to cost at most ``budget`` tokens, with a visible marker; None if even the
    marker does not fit."""
    total = count_tokens(item.content, counter.encoding)
    framing = counter.count_text(item.role, "")
    marker_cost = count_tokens(TRUNCATION_MARKER.format(kept=total, total=total), counter.encoding) + 2
    keep = budget - framing - marker_cost
    if keep <= 0:
        return None
    while True:
        head = truncate_to_tokens(item.content, keep, counter.encoding)
        content = head + TRUNCATION_MARKER.format(kept=count_tokens(head, counter.encoding), total=total)
        cost = await counter.count_one(item.role, content)
        if cost <= budget or keep <= 0:
            break
        # Re-tokenizing the joined text can merge tokens differently; shrink until it really fits.
        keep -= max(1, cost - budget)
    if cost > budget:
        return None
    return HistoryItem(item.id, item.role, content, truncated=True), cost


async def fit_newest(
    items: Sequence[HistoryItem],
    counter: TokenCounter,
    budget: int,
    max_count: int,
    *,
    truncate_newest: bool = True,
) -> Window:
    """The longest tail of ``items`` (at most ``max_count`` messages) within ``budget`` tokens."""
    chosen: list[HistoryItem] = []
    used = 0
    end = len(items)
    stop = False
    while end > 0 and not stop and len(chosen) < max_count:
        start = max(0, end - min(COUNT_BATCH, max_count - len(chosen)))
        batch = items[start:end]
        counts = await counter.counts(batch)
        for item, cost in zip(reversed(batch), reversed(counts)):
            if len(chosen) >= max_count or used + cost > budget:
                stop = True
                break
            chosen.append(item)
            used += cost
        end = start
    truncated = sum(1 for item in chosen if item.truncated)
    if not chosen and items and max_count > 0 and truncate_newest:
        cut = await truncate_item(items[-1], counter, budget)
        if cut is not None:
            chosen.append(cut[0])
            used = cut[1]
            truncated = 1
    chosen.reverse()
    return Window(chosen, used, truncated)
