"""The A2A conformance kit (TCK) for the tests: where it is, and a virtualenv of its own.

The kit is a read-only folder outside the repository (``shared/a2a-tck``, see its ORIGIN.md). It is
found through ``A2A_TCK_DIR``, else ``../shared/a2a-tck`` beside the repository, else beside the
repository the ``origin`` remote names (CI runs in a clone of the main repository, whose origin
has ``shared/`` beside it). Its virtualenv is built once per version of its lock file, under
``~/.cache/taskforce`` (or ``$XDG_CACHE_HOME``), with the versions its ``uv.lock`` pins; each run
works in a copy of the kit, since the kit writes its reports into the folder it runs in.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.support.servers import REPO_ROOT

TCK_DIR_ENV = "A2A_TCK_DIR"
_KIT = Path("shared") / "a2a-tck"


def locate_tck() -> Path | None:
    candidates = []
    if os.environ.get(TCK_DIR_ENV):
        candidates.append(Path(os.environ[TCK_DIR_ENV]))
    candidates.append(REPO_ROOT.parent / _KIT)
    origin = _origin_path()
    if origin is not None:
        candidates.append(origin.parent / _KIT)
    return next((path for path in candidates if (path / "run_tck.py").is_file()), None)


def _origin_path() -> Path | None:
    """The folder of the ``origin`` remote when it is a local repository (a clone of /work/main)."""
    try:
        url = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "remote", "get-url", "origin"], capture_output=True, text=True, check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(url.removeprefix("file://"))
    return path.resolve() if path.is_absolute() and path.exists() else None


def pinned_requirements(tck: Path) -> list[str]:
    """The kit's dependencies and theirs, at the versions its ``uv.lock`` pins (no dev tools)."""
    lock = tomllib.loads((tck / "uv.lock").read_text(encoding="utf-8"))
    packages = {package["name"]: package for package in lock["package"]}
    root = next(package for package in lock["package"] if package.get("source", {}).get("editable") == ".")
    wanted, stack = set(), [dep["name"] for dep in root.get("dependencies", [])]
    while stack:
        name = stack.pop()
        if name not in wanted:
            wanted.add(name)
            stack.extend(dep["name"] for dep in packages[name].get("dependencies", []))
    return sorted(f"{name}=={packages[name]['version']}" for name in wanted)


def tck_python(tck: Path) -> Path:
    """The Python of the kit's virtualenv, built on first use for this version of the kit."""
    digest = hashlib.sha256((tck / "uv.lock").read_bytes() + (tck / "pyproject.toml").read_bytes()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "taskforce"
    venv = cache / f"a2a-tck-venv-{digest}"
    python = venv / "bin" / "python"
    ready = venv / ".installed"
    if ready.exists():
        return python
    # A build cut short leaves no marker: it is built again from scratch.
    shutil.rmtree(venv, ignore_errors=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, text=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *pinned_requirements(tck)],
            check=True, capture_output=True, text=True,
        )
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"the A2A TCK's virtualenv could not be built: {exc.stderr or exc}") from exc
    ready.write_text("\n".join(pinned_requirements(tck)) + "\n", encoding="utf-8")
    return python


def working_copy(tck: Path, into: Path) -> Path:
    """A writable copy of the kit (it writes reports/ where it runs)."""
    copy = into / "a2a-tck"
    shutil.copytree(tck, copy, ignore=shutil.ignore_patterns(".venv", "reports", "__pycache__"))
    for path in [copy, *copy.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    return copy
