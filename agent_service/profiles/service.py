"""Profiles come from a YAML file read once at start-up."""

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

    @classmethod
    def from_file(cls, path: Path) -> ProfileStore:
        return cls(ProfilesFile.model_validate(yaml.safe_load(path.read_text(encoding="utf-8"))).profiles)

    def get(self, name: str) -> Profile:
        try:
            return self._profiles[name]
        except KeyError:
            raise ProfileNotFound(f"no profile named {name!r}") from None

    def all(self) -> list[Profile]:
        return list(self._profiles.values())

    def check_tools(self, has_tool: Callable[[str], bool]) -> None:
        """Fail start-up when a profile names a tool the registry does not have."""
        for profile in self._profiles.values():
            missing = {name for name in profile.tools if not has_tool(name)}
            if missing:
                raise ValueError(f"profile {profile.name!r} names unknown tools {sorted(missing)}")
