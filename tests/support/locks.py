"""The locks of requirements/, read: ``name==version [; marker]`` entries with their ``--hash`` lines, as
``make lock`` (uv pip compile) writes them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import Marker
from packaging.utils import canonicalize_name

from tests.support.servers import REPO_ROOT

# What the image installs (the Dockerfile): the versions CI tested, with their hashes.
RUNTIME_LOCK = REPO_ROOT / "requirements" / "runtime.txt"
# What `make install` (and so CI) installs: the runtime's and the tests' and tools'.
DEV_LOCK = REPO_ROOT / "requirements" / "dev.txt"

_ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)\s*(?:;\s*(?P<marker>[^\\]+?))?\s*\\?$")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class Locked:
    version: str
    marker: Marker | None
    hashes: frozenset[str]

    def applies(self) -> bool:
        return self.marker is None or self.marker.evaluate()


def read_lock(path: Path) -> dict[str, Locked]:
    """A uv/pip-compile lock: ``name==version [; marker] \\`` then its ``--hash`` lines."""
    entries: dict[str, Locked] = {}
    name = version = marker = None
    hashes: set[str] = set()

    def close() -> None:
        if name is not None:
            assert name not in entries, f"{path.name}: {name} is locked twice"
            entries[name] = Locked(version, Marker(marker) if marker else None, frozenset(hashes))

    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            close()
            found = _ENTRY.match(line)
            assert found, f"{path.name}: not a pinned requirement: {line!r}"
            name, version, marker = canonicalize_name(found["name"]), found["version"], found["marker"]
            hashes = set()
        else:
            hashes.update(_HASH.findall(line))
    close()
    return entries
