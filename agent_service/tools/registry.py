"""The tools an agent can use, by name; a profile picks the subset its model is offered."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.ext.asyncio import async_sessionmaker

from agent_service.tools.ask_user import AskUserTool
from agent_service.tools.base import Tool, ToolError
from agent_service.tools.calculator import CalculatorTool
from agent_service.tools.create_file import CreateFileTool
from agent_service.tools.current_time import CurrentTimeTool
from agent_service.tools.emit_data import EmitDataTool
from agent_service.tools.knowledge_search import KnowledgeSearchTool
from agent_service.tools.reply import ReplyTool
from agent_service.tools.share_link import ShareLinkTool


class UnknownToolError(ToolError, LookupError):
    """A name no tool has: from a profile (configuration error) or from the model (it is told)."""

    def __init__(self, name: str, known: Iterable[str]) -> None:
        super().__init__(f"unknown tool {name!r}; available tools: {', '.join(sorted(known)) or 'none'}")
        self.name = name


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"two tools are named {tool.name!r}")
            self._tools[tool.name] = tool

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(name, self._tools) from None


def build_registry(sessionmaker: async_sessionmaker, *, artifact_max_bytes: int) -> ToolRegistry:
    """Every built-in tool (``knowledge_search`` answers from what ``knowledge.indexer`` loaded; the
    tools that hand the user a file or data take at most ``artifact_max_bytes``)."""
    return ToolRegistry([
        CalculatorTool(), KnowledgeSearchTool(sessionmaker), CurrentTimeTool(), AskUserTool(),
        CreateFileTool(artifact_max_bytes), ShareLinkTool(), EmitDataTool(artifact_max_bytes), ReplyTool(),
    ])
