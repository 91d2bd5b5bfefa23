from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

# A title as people type it: surrounding blanks dropped; a rename cannot leave it empty.
Title = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]


class ConversationCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Empty: the conversation is titled after its first message.
    title: Annotated[str, Field(max_length=200)] = ""


class ConversationUpdate(BaseModel):
    """Body of ``PATCH /conversations/{id}``."""

    model_config = ConfigDict(extra="forbid")

    title: Title


class ConversationOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    title: str
    owner_id: str
    org_id: str | None
    created_at: datetime
    updated_at: datetime
    last_seq: int
    agent_status: str | None = None


class ConversationList(BaseModel):
    items: list[ConversationOut]
    limit: int
    offset: int
