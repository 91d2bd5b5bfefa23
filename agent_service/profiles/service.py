"""Profiles come from a YAML file read once at start-up. A profile that offers tools of MCP
servers is completed when it is read (``with_tools``): those servers' tools change while the
service runs, so the profile a run gets names the ones on offer then."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import yaml

from agent_service.errors import ProfileNotFound
from agent_service.profiles.schemas import Profile, ProfilesFile


class ProfileStore:
    def __init__(self, profiles: Iterable[Profile]) -> None:
        self._profiles: dict[str, Profile] = {}
        for profile in profiles:
            if profile.name in self._profiles:
                raise ValueError(f"profile {profile.name!r} is defined twice")
            self._profiles[profile.name] = profile
        self._complete: Callable[[Profile], Profile] | None = None

    def with_tools(self, complete: Callable[[Profile], Profile]) -> None:
        """From now on a profile with ``mcp`` servers is read through ``complete`` (their tools added)."""
        self._complete = complete

    def _read(self, profile: Profile) -> Profile:
        if profile.mcp and self._complete is not None:
            return self._complete(profile)
        return profile

    @classmethod
    def from_file(cls, path: Path) -> ProfileStore:
        return cls(ProfilesFile.model_validate(yaml.safe_load(path.read_text(encoding="utf-8"))).profiles)

    def get(self, name: str) -> Profile:
        try:
            profile = self._profiles[name]
        except KeyError:
            raise ProfileNotFound(f"no profile named {name!r}") from None
        return self._read(profile)

    def all(self) -> list[Profile]:
        return [self._read(profile) for profile in self._profiles.values()]

    def configured(self) -> list[Profile]:
        """The profiles as the file says them (without the MCP tools on offer now)."""
        return list(self._profiles.values())

    def check_tools(self, has_tool: Callable[[str], bool]) -> None:
        """Fail start-up when a profile names a tool the registry does not have."""
        for profile in self._profiles.values():
            missing = {name for name in profile.tools if not has_tool(name)}
            if missing:
                raise ValueError(f"profile {profile.name!r} names unknown tools {sorted(missing)}")
