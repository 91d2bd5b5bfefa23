"""The product as an operator installs it: the wheel built from a source tree, installed without extras into
a virtual environment of its own, outside any checkout (the Dockerfile does the same)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

from tests.support.servers import REPO_ROOT

# What the wheel is built from (pyproject.toml's packages and its readme and licence).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "shared", "agent_service", "conversation_service", "migrations")


def _run(command: list[str], cwd: Path | None = None, timeout: float = 600) -> str:
    result = subprocess.run(
        command, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout, check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result.stdout


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without what would let a child import this checkout instead of what is installed."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return {**env, **extra}


def build_wheel(out: Path, source: Path = REPO_ROOT) -> Path:
    """Build the wheel from a copy of ``source`` (a build writes ``build/`` and ``*.egg-info`` beside the
    sources; the copy keeps them out of the checkout and lets parallel tests build at once)."""
    tree = out / "src"
    for name in SOURCES:
        path = source / name
        if path.is_dir():
            shutil.copytree(path, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif path.exists():
            tree.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, tree / name)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out / "dist"), str(tree)])
    (wheel,) = (out / "dist").glob("*.whl")
    return wheel


def environment(target: Path, lock: Path) -> Path:
    """A fresh virtual environment at ``target`` holding ``lock``'s packages (at their versions and hashes)
    and no pip; returns its python. An earlier release runs from its sources in one (test_upgrade.py)."""
    venv.EnvBuilder(with_pip=False, clear=True).create(target)
    python = target / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--require-hashes", "--no-deps",
          "-r", str(lock)])
    return python


def install(wheel: Path, target: Path, lock: Path | None = None) -> Path:
    """A fresh virtual environment at ``target`` with ``wheel`` installed, no extras; with ``lock``, every
    dependency at its locked version and hash first. As the Dockerfile does, the environment gets no pip of
    its own: this interpreter's pip installs into it (``--python``), so what runs there is only the lock's
    packages and the project. Returns the environment's python."""
    if lock is not None:
        python = environment(target, lock)
        pip = [sys.executable, "-m", "pip", "--python", str(python)]
        _run([*pip, "install", "-q", "--no-deps", str(wheel)])
        _run([*pip, "check"])
        return python
    venv.EnvBuilder(with_pip=False, clear=True).create(target)
    python = target / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", str(wheel)])
    return python
