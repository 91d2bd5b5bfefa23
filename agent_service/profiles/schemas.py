"""An agent profile: who the agent is and what it may do."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shared.protocol import ProfileInfo


class ProfileMCPServer(BaseModel):
    """An MCP server (configured for the deployment: ``AGENT_SERVICE_MCP_SERVERS``) whose tools a
    profile offers, and which of them. Patterns are ``fnmatch`` patterns of the server's own tool
    names (before the prefix); a tool both allowed and denied is denied."""

    model_config = ConfigDict(extra="forbid")

    server: Annotated[str, Field(min_length=1, max_length=64)]
    allow: list[str] = ["*"]
    deny: list[str] = []
    # The server's tool name -> whether each call waits for the user's approval, over the default
    # its annotations give (a tool that may change something asks: destructiveHint, or no readOnlyHint).
    approval: dict[str, bool] = {}


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=128)]
    description: str = ""
    system_prompt: str
    model: str | None = None
    tools: list[str] = []
    max_steps: Annotated[int, Field(ge=1, le=100)] = 8
    # Completion tokens per model call.
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    # The model's context: each call's prompt is the window of the transcript that fits it with the
    # answer's max_tokens (runs.context_window); only a current turn too long for it ends the run
    # with TOKEN_LIMIT_EXCEEDED.
    max_context_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: float | None = None
    # Tools that wait for the user's approval (ASK_USER kind "approval") before each call.
    approval_required_tools: list[str] = []
    # The MCP servers whose tools the profile offers besides ``tools`` (agent_service.mcp); the
    # running service adds them to ``tools`` (and those that ask to ``approval_required_tools``).
    mcp: list[ProfileMCPServer] = []

    @model_validator(mode="after")
    def _approval_tools_are_tools(self) -> Profile:
        unknown = set(self.approval_required_tools) - set(self.tools)
        if unknown:
            raise ValueError(f"approval_required_tools not in tools: {sorted(unknown)}")
        servers = [entry.server for entry in self.mcp]
        if len(servers) != len(set(servers)):
            raise ValueError("an MCP server is named twice in mcp")
        return self

    def info(self) -> ProfileInfo:
        return ProfileInfo(
            name=self.name, description=self.description, model=self.model, tools=self.tools, max_steps=self.max_steps
        )


class ProfilesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    profiles: Annotated[list[Profile], Field(min_length=1)]
