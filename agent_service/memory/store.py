"""What a memory store does. Every call is for one owner, an (organisation, user) pair: a store never
returns or deletes another owner's memories."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Owner:
    user_id: str
    org_id: str | None

    @property
    def org_key(self) -> str:
        """The organisation as stored: '' for a user without one."""
        return self.org_id or ""


@dataclass(frozen=True, slots=True)
class Memory:
    id: int
    content: str
    created_at: datetime
    session_id: str | None = None


@dataclass(frozen=True, slots=True)
class Candidate:
    """A memory a recall found, with its relevance to the query (higher is better, unbounded)."""

    memory: Memory
    relevance: float


class MemoryStore(Protocol):
    async def remember(self, owner: Owner, content: str, session_id: str | None, at: datetime) -> Memory: ...

    async def recall(self, owner: Owner, query: str, limit: int) -> list[Candidate]: ...

    async def list(self, owner: Owner, limit: int) -> list[Memory]: ...

    async def delete(self, owner: Owner, memory_id: int | None = None) -> int:
        """Delete one memory (``memory_id``) or all of the owner's; how many were deleted."""
        ...
