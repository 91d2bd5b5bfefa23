"""The code's shape, checked: no function longer than a screen and a half, and no two sibling
packages of a service that import each other (a cycle hides which one owns the behaviour)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("agent_service", "conversation_service", "shared")
MAX_FUNCTION_LINES = 80


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_is_longer_than_80_lines(package: str) -> None:
    long = [entry for path in _modules(package) for entry in _long_functions(path)]
    assert long == [], "split these functions:\n" + "\n".join(long)


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def _sibling_of(path: Path, service: str) -> str | None:
    """The top-level sub-package of ``service`` that holds ``path`` (None for the service's own modules)."""
    parts = path.relative_to(ROOT / service).parts
    return parts[0] if len(parts) > 1 else None


@pytest.mark.parametrize("service", ("agent_service", "conversation_service"))
def test_no_two_sibling_packages_import_each_other(service: str) -> None:
    edges: dict[str, set[str]] = defaultdict(set)
    for path in _modules(service):
        source = _sibling_of(path, service)
        if source is None:
            continue
        for module in _imported_modules(path):
            parts = module.split(".")
            if parts[0] == service and len(parts) > 1 and parts[1] != source and (ROOT / service / parts[1]).is_dir():
                edges[source].add(parts[1])
    cycles = sorted({tuple(sorted((a, b))) for a in edges for b in edges[a] if a in edges.get(b, ())})
    assert cycles == [], f"sibling packages that import each other: {cycles}"
