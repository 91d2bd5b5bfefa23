"""Every relative link of the repository's Markdown files leads somewhere: the file exists and, when the link
names a section (``#anchor``), the file has a heading with that anchor (GitHub's slugs). Documents move (the
benchmark reports went to docs/benchmarks-history.md): a link left behind fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")
SKIP = {".venv", "node_modules", ".git", "build", "dist"}


def _markdown_files() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.md") if not SKIP & set(p.relative_to(ROOT).parts))


def _anchors(path: Path) -> set[str]:
    anchors = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
            anchors.add(slug)
    return anchors


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target):
            continue  # a URL (https:, mailto:)
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        missing_section = anchor and resolved.suffix == ".md" and anchor.lower() not in _anchors(resolved)
        if not resolved.exists() or missing_section:
            broken.append(target)
    return broken


def test_every_relative_link_of_the_documentation_resolves() -> None:
    found = {str(p.relative_to(ROOT)): broken for p in _markdown_files() if (broken := broken_links(p))}
    assert found == {}


def test_a_link_to_a_missing_file_or_section_is_found(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A title\n\n[ok](#a-title) [gone](b.md) [no section](a.md#nothing) [web](https://x.org)\n")
    assert broken_links(tmp_path / "a.md") == ["b.md", "a.md#nothing"]
