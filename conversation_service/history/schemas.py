"""Inputs and outputs of the HistoryExtractor."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from shared.protocol import ChatMessage


@dataclass(frozen=True, slots=True)
class HistoryRecord:
    """One stored message of the conversation, as the extractor needs it (oldest first)."""

    id: str
    role: str
    content: str
    created_at: datetime | None = None

    @classmethod
    def from_message(cls, message: Any) -> HistoryRecord:
        """From a stored message (``conversation_service.db.models.Message`` or anything shaped
        like it: ``id``, ``role``, ``content``, ``created_at``)."""
        return cls(
            id=str(message.id),
            role=message.role,
            content=message.content or "",
            created_at=getattr(message, "created_at", None),
        )


@dataclass(frozen=True, slots=True)
class HistoryStats:
    """How the window was cut and how full the budget is, so the caller can warn the user."""

    strategy: str
    # Usable messages looked at (after role mapping): the newest the window could take and a few
    # more (HistoryExtractor.rows_to_read), or up to HISTORY_MAX_INPUT_MESSAGES for the summary.
    total_messages: int
    included_messages: int  # verbatim messages in the result
    dropped_messages: int  # neither included nor summarised
    truncated_messages: int  # included, but cut to fit (marked in their text)
    summarized_messages: int  # folded into the summary message
    tokens_used: int
    token_budget: int
    near_limit: bool
    summary_used: bool = False
    summary_refreshed: bool = False
    summary_error: str | None = None  # why compression was skipped this time (the window still went out)
    skipped_roles: int = 0  # records whose role maps to nothing the agent understands

    @property
    def fill_ratio(self) -> float:
        return self.tokens_used / self.token_budget if self.token_budget else 0.0

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "fill_ratio": round(self.fill_ratio, 4)}


@dataclass(frozen=True, slots=True)
class HistoryResult:
    messages: list[ChatMessage]
    stats: HistoryStats
