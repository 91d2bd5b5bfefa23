"""The code's shape, checked: no function longer than a screen and a half, and no loop of imports
between the parts of a package, its sub-packages and its own modules alike, whatever the loop's
length (a loop hides which part owns the behaviour); nor between any two modules, an import inside a
function included (a deferred import still makes two modules depend on each other)."""

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
    """Every module ``path`` imports, ``from a import b`` counted as ``a`` and ``a.b`` (``b`` may be a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def _part_of(package: str, name: str) -> str | None:
    """``name`` when it is a sub-package or a top-level module of ``package`` (``deps``, ``lifespan``...)."""
    if name == "__init__":
        return None
    found = (ROOT / package / name).is_dir() or (ROOT / package / f"{name}.py").is_file()
    return name if found else None


def import_graph(package: str) -> dict[str, set[str]]:
    """Which top-level parts of ``package`` (its sub-packages and its own modules) import which others."""
    edges: dict[str, set[str]] = defaultdict(set)
    for path in _modules(package):
        source = _part_of(package, path.relative_to(ROOT / package).parts[0].removesuffix(".py"))
        if source is None:
            continue
        for module in _imported_modules(path):
            parts = module.split(".")
            if parts[0] == package and len(parts) > 1 and (target := _part_of(package, parts[1])) not in (None, source):
                edges[source].add(target)
    return edges


def import_loops(edges: dict[str, set[str]]) -> list[list[str]]:
    """The loops of the graph, one per strongly connected part (Tarjan), each as a path that closes."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    loops: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            part = set(stack[stack.index(node):])
            del stack[stack.index(node):]
            if len(part) > 1:
                loops.append(_closing_path(min(part), part, edges))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(loops)


def _closing_path(start: str, part: set[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest path from ``start`` back to itself inside ``part`` (breadth first): what to read to cut it."""
    came_from: dict[str, str] = {}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(edges.get(node, set()) & part):
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [start, *reversed(path[:-1]), start] if node != start else [start, start]
            if target not in came_from:
                came_from[target] = node
                queue.append(target)
    raise AssertionError(f"{start} is in a loop it cannot close")


@pytest.mark.parametrize("package", PACKAGES)
def test_no_loop_between_the_parts_of_a_package(package: str) -> None:
    """Sibling packages and top-level modules (``deps``, ``settings``, ``lifespan``...) of a service, and of
    ``shared``: no loop of any length (a imports b imports c imports a) between them."""
    loops = import_loops(import_graph(package))
    assert loops == [], "parts that import each other in a loop:\n" + "\n".join(" -> ".join(loop) for loop in loops)


def test_a_loop_of_three_is_found() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_loops(edges) == [["a", "b", "c", "a"]]
    assert import_loops({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_top_level_modules_are_parts_of_the_graph() -> None:
    edges = import_graph("conversation_service")
    assert "deps" in edges and "lifespan" in edges["app"]


def module_graph() -> dict[str, set[str]]:
    """Which modules of the three packages import which others, wherever the import stands (a package is
    its ``__init__``; importing ``a.b.c`` is an edge to ``a.b.c``, not to the packages above it)."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in _modules(package):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        edges[name] |= {module for module in _imported_modules(path) if module in modules and module != name}
    return edges


def test_no_loop_between_modules() -> None:
    """Wrappers depend on what they wrap, never both ways (``shared.tracing.core`` once built the
    wrappers of ``db``, ``genai`` and ``http_client``, which imported its ``Tracing``)."""
    loops = import_loops(module_graph())
    assert loops == [], "modules that import each other in a loop:\n" + "\n".join(" -> ".join(loop) for loop in loops)
