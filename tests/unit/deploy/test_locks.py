"""The locks (requirements/runtime.txt for the image, requirements/dev.txt for CI and ``make install``), read
as files and against the packages' own metadata: each pins, with hashes, what pyproject.toml asks for, and
nothing else; the image's versions are those CI tested.

Which packages a requirement brings in is read from the installed distributions' metadata: ``make install``
installs exactly the dev lock, so a package installed at another version than the lock's means the
environment is stale (run ``make install``), and is reported as such. Entries whose markers do not hold on
this machine (Windows-only packages, backports for older Pythons) must still be asked for by some locked
package under that marker."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.locks import DEV_LOCK, RUNTIME_LOCK, Locked, read_lock

ROOT = Path(__file__).resolve().parents[3]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = canonicalize_name(PYPROJECT["project"]["name"])
def _requirements(extras: tuple[str, ...]) -> list[Requirement]:
    """pyproject.toml's requirements for these extras, the project's own extras expanded."""
    wanted, found, seen = list(extras), [Requirement(r) for r in PYPROJECT["project"]["dependencies"]], set()
    while wanted:
        extra = wanted.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for text in PYPROJECT["project"]["optional-dependencies"][extra]:
            requirement = Requirement(text)
            if canonicalize_name(requirement.name) == PROJECT:
                wanted.extend(requirement.extras)
            else:
                found.append(requirement)
    return found


def _holds(requirement: Requirement, extras: set[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in extras | {""})


def _closure(roots: list[Requirement], lock: dict[str, Locked]) -> tuple[set[str], set[str]]:
    """The packages these requirements bring in on this machine, read from the installed metadata, and the
    names every visited package asks for under any marker (what a lock for other platforms may need)."""
    reached: set[str] = set()
    named: set[str] = {canonicalize_name(r.name) for r in roots}
    extras_of: dict[str, set[str]] = {}
    todo = [r for r in roots if _holds(r, set())]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        new_extras = set(requirement.extras) - extras_of.get(name, set())
        if name in reached and not new_extras:
            continue
        reached.add(name)
        extras = extras_of.setdefault(name, set())
        extras |= set(requirement.extras)
        assert name in lock, f"{name} is required (by pyproject.toml or a locked package) but not locked: run `make lock`"
        installed = metadata.version(name)
        assert installed == lock[name].version, (
            f"{name} {installed} is installed, the lock says {lock[name].version}: run `make install`")
        for text in metadata.requires(name) or []:
            child = Requirement(text)
            named.add(canonicalize_name(child.name))
            if _holds(child, extras):
                todo.append(child)
    return reached, named


@pytest.mark.parametrize(("lock_path", "extras"), [(RUNTIME_LOCK, ()), (DEV_LOCK, ("dev",))], ids=["runtime", "dev"])
def test_the_lock_pins_what_pyproject_asks_for_with_hashes(lock_path: Path, extras: tuple[str, ...]) -> None:
    lock = read_lock(lock_path)
    for requirement in _requirements(extras):
        name = canonicalize_name(requirement.name)
        assert name in lock, f"{lock_path.name}: {name} is not locked: run `make lock`"
        assert requirement.specifier.contains(lock[name].version, prereleases=True), (
            f"{lock_path.name}: {name}=={lock[name].version} does not satisfy {requirement}: run `make lock`")
    assert PROJECT not in lock, "the project itself is installed from its wheel, not from the lock"
    unhashed = sorted(name for name, entry in lock.items() if not entry.hashes)
    assert unhashed == [], f"{lock_path.name}: entries without a hash: {unhashed}"


@pytest.mark.parametrize(("lock_path", "extras"), [(RUNTIME_LOCK, ()), (DEV_LOCK, ("dev",))], ids=["runtime", "dev"])
def test_nothing_in_the_lock_is_unused(lock_path: Path, extras: tuple[str, ...]) -> None:
    lock = read_lock(lock_path)
    reached, named = _closure(_requirements(extras), lock)
    here = {name for name, entry in lock.items() if entry.applies()}
    assert sorted(here - reached) == [], f"{lock_path.name}: locked but required by nothing: run `make lock`"
    assert sorted(reached - here) == [], f"{lock_path.name}: required but its marker leaves it out here"
    elsewhere = set(lock) - here
    assert sorted(elsewhere - named) == [], f"{lock_path.name}: locked for other platforms, required by nothing"


def test_the_image_runs_the_versions_ci_tested() -> None:
    """The runtime lock is the dev lock's versions and hashes, less what only the tests and tools use."""
    runtime, dev = read_lock(RUNTIME_LOCK), read_lock(DEV_LOCK)
    assert set(runtime) <= set(dev), sorted(set(runtime) - set(dev))
    differ = {name: (entry.version, dev[name].version) for name, entry in runtime.items()
              if (entry.version, entry.hashes) != (dev[name].version, dev[name].hashes)}
    assert differ == {}, f"runtime and dev locks disagree (run `make lock`): {differ}"
    for tool in ("pytest", "ruff", "uv", "kubernetes-validate", "locust"):
        assert tool not in runtime and tool in dev, tool


def test_the_locks_are_read_by_what_installs() -> None:
    """The Dockerfile installs the runtime lock, `make install` (and so CI's `make test`) the dev lock, both
    with --require-hashes."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"--require-hashes[^\n]*-r\s+\S*requirements/runtime\.txt", dockerfile), dockerfile
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"pip install -q --require-hashes --no-deps -r requirements/dev\.txt", makefile)
    assert re.search(r"^\$\(VENV\)/\.installed: .*requirements/dev\.txt", makefile, re.MULTILINE)
    assert "make test" in (ROOT / ".ci" / "run").read_text()
