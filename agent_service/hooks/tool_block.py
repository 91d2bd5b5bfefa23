"""The tool block hook: refuses named tools to named organisations.

``AGENT_SERVICE_BLOCKED_TOOLS=acme:calculator,globex:knowledge_search``: each entry is
``organisation:tool``. A refused call is not run; the model reads why (the TOOL_END event says it
too) and carries on without it.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent_service.hooks.base import BeforeTool, Hook
from agent_service.settings import AgentServiceSettings


class OrgToolBlockHook(Hook):
    def __init__(self, blocked: Iterable[tuple[str, str]]) -> None:
        self._blocked = frozenset(blocked)

    @classmethod
    def from_settings(cls, settings: AgentServiceSettings) -> OrgToolBlockHook:
        return cls(parse_blocked(settings.blocked_tools))

    async def before_tool(self, data: BeforeTool) -> None:
        org = data.run.org_id
        if org is not None and (org, data.tool) in self._blocked:
            data.refuse(f"the tool {data.tool} is disabled for organisation {org}")


def parse_blocked(entries: Iterable[str]) -> list[tuple[str, str]]:
    pairs = []
    for entry in entries:
        org, sep, tool = entry.partition(":")
        if not sep or not org.strip() or not tool.strip():
            raise ValueError(f"blocked tool {entry!r} is not of the form organisation:tool")
        pairs.append((org.strip(), tool.strip()))
    return pairs
