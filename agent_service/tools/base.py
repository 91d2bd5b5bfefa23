"""The tool interface: a name, a description the model reads and a JSON Schema of the arguments.

``run`` returns a JSON-serialisable result or raises ``ToolError`` with a message the model can
read and act on (the run goes on; TOOL_END reports ``ok: false``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from shared.llm.base import ToolSpec
from shared.protocol import UserContext


@dataclass(frozen=True, slots=True)
class ToolContext:
    session_id: str
    run_id: str
    user_context: UserContext


class ToolError(Exception):
    """A failure the model is told about (bad arguments, nothing found, limit exceeded)."""


class Tool(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    parameters: ClassVar[dict[str, Any]]

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    @abstractmethod
    async def run(self, args: dict[str, Any], ctx: ToolContext) -> Any: ...
