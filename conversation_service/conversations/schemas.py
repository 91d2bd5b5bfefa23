from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class ConversationCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: Annotated[str, Field(max_length=200)] = ""


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
