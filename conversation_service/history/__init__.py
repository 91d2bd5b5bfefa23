"""History hydration: the window of a conversation's past messages handed to the agent (Story 3)."""

from conversation_service.history.context import map_role
from conversation_service.history.extractor import HistoryExtractor
from conversation_service.history.schemas import HistoryRecord, HistoryResult, HistoryStats
from conversation_service.history.settings import HistorySettings, HistoryStrategyName
from conversation_service.history.summary_cache import CachedSummary, InMemorySummaryCache, SummaryCache

__all__ = [
    "CachedSummary",
    "HistoryExtractor",
    "HistoryRecord",
    "HistoryResult",
    "HistorySettings",
    "HistoryStats",
    "HistoryStrategyName",
    "InMemorySummaryCache",
    "SummaryCache",
    "map_role",
]
