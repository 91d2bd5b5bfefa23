"""The A2A 1.0 requests this server reads, as ProtoJSON (spec 5.5) allows them.

Field names are camelCase on the wire; the proto's snake_case names are accepted as well (a
ProtoJSON parser must), unknown fields are ignored (spec 5.7), 64-bit integers may come as strings.
What we send back is built in ``projection`` and ``card``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from shared.protocol import MAX_CONTENT_CHARS, MAX_ID_CHARS

_Id = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS)]
# Generous: message ids are the client's; only ids that name our own objects are bounded tight.
_ClientId = Annotated[str, Field(min_length=1, max_length=1024)]
_HistoryLength = Annotated[int, Field(ge=0)]


class _Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)


class TaskState(StrEnum):
    SUBMITTED = "TASK_STATE_SUBMITTED"
    WORKING = "TASK_STATE_WORKING"
    COMPLETED = "TASK_STATE_COMPLETED"
    FAILED = "TASK_STATE_FAILED"
    CANCELED = "TASK_STATE_CANCELED"
    INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
    REJECTED = "TASK_STATE_REJECTED"
    AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"


TERMINAL_STATES = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED})
# Where a blocking SendMessage returns and a SendStreamingMessage stream closes (spec 3.2.2).
INTERRUPTED_STATES = frozenset({TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED})


class Role(StrEnum):
    USER = "ROLE_USER"
    AGENT = "ROLE_AGENT"


class Part(_Wire):
    """One piece of a message: exactly one of ``text``, ``raw`` (base64), ``url`` or ``data``."""

    text: Annotated[str, Field(max_length=MAX_CONTENT_CHARS)] | None = None
    raw: str | None = None
    url: str | None = None
    data: Any = None
    filename: str | None = None
    media_type: str | None = None
    metadata: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_content(self) -> Part:
        present = [name for name in ("text", "raw", "url", "data") if getattr(self, name) is not None]
        if len(present) != 1:
            raise ValueError(f"a part holds exactly one of text, raw, url, data (got {present or 'none'})")
        return self


class Message(_Wire):
    message_id: _ClientId
    role: Role
    parts: Annotated[list[Part], Field(min_length=1, max_length=100)]
    context_id: _Id | None = None
    task_id: _Id | None = None
    reference_task_ids: list[str] = []
    metadata: dict[str, Any] | None = None
    extensions: list[str] = []


class SendMessageConfiguration(_Wire):
    accepted_output_modes: list[str] = []
    history_length: _HistoryLength | None = None
    return_immediately: bool = False
    task_push_notification_config: dict[str, Any] | None = None


class SendMessageRequest(_Wire):
    message: Message
    configuration: SendMessageConfiguration = SendMessageConfiguration()
    metadata: dict[str, Any] | None = None
    tenant: str = ""


class GetTaskRequest(_Wire):
    id: _Id
    history_length: _HistoryLength | None = None
    tenant: str = ""


class CancelTaskRequest(_Wire):
    id: _Id
    metadata: dict[str, Any] | None = None
    tenant: str = ""


class SubscribeToTaskRequest(_Wire):
    id: _Id
    tenant: str = ""


class ListTasksRequest(_Wire):
    context_id: _Id | None = None
    status: TaskState | None = None
    page_size: Annotated[int, Field(ge=1, le=100)] = 50
    page_token: str = ""
    history_length: _HistoryLength | None = None
    status_timestamp_after: datetime | None = None
    include_artifacts: bool = False
    tenant: str = ""

    @model_validator(mode="before")
    @classmethod
    def _unspecified_status(cls, values: Any) -> Any:
        # TASK_STATE_UNSPECIFIED (or an empty value) is the proto default: no filter.
        if isinstance(values, dict) and values.get("status") in ("", "TASK_STATE_UNSPECIFIED", 0):
            values = {k: v for k, v in values.items() if k != "status"}
        return values

    @model_validator(mode="after")
    def _utc(self) -> ListTasksRequest:
        after = self.status_timestamp_after
        if after is not None and after.tzinfo is None:
            # ProtoJSON times are UTC; one without a zone is read as UTC too.
            object.__setattr__(self, "status_timestamp_after", after.replace(tzinfo=UTC))
        return self
