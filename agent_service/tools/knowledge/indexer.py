"""Loading the knowledge sources into the database at start-up, idempotently by content hash, so the
table always mirrors the sources. Files are read and hashed in a worker thread, off the event loop.

The default sources are the checkout's ``docs/`` and ``README.md``; an installed wheel has neither (the
image ships the docs and points ``AGENT_SERVICE_KNOWLEDGE_DIR`` at them). When no source exists the table
is left as it is, with a warning that names the setting: a replica started without its folder (a missing
volume) must not empty what the others index.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from sqlalchemy.ext.asyncio import async_sessionmaker

from agent_service.settings import REPO_ROOT
from agent_service.tools.knowledge.repository import KnowledgeDocument, KnowledgeRepository
from shared.transactions import transaction

logger = logging.getLogger(__name__)

# The project's own documentation is the sample corpus.
DEFAULT_KNOWLEDGE_SOURCES: tuple[Path, ...] = (REPO_ROOT / "docs", REPO_ROOT / "README.md")
SUFFIXES = frozenset({".md", ".markdown", ".txt", ".rst"})
MAX_FILE_BYTES = 1_000_000
MAX_DOCUMENTS = 5_000
MAX_TITLE_CHARS = 512
MAX_PATH_CHARS = 512


@dataclass(frozen=True, slots=True)
class IndexReport:
    added: int
    updated: int
    unchanged: int
    removed: int
    skipped: int


def _title(text: str, path: Path) -> str:
    for line in text.splitlines():
        match = re.match(r"^#\s+(.+?)\s*#*\s*$", line)
        if match:
            return match.group(1)[:MAX_TITLE_CHARS]
    return (path.stem.replace("_", " ").replace("-", " ").strip().capitalize() or path.name)[:MAX_TITLE_CHARS]


def _files(source: Path) -> list[tuple[Path, str]]:
    """(file, stored path) pairs: a folder's files are stored as ``<folder name>/<relative path>``."""
    if source.is_file():
        return [(source, source.name)]
    if not source.is_dir():
        return []
    found = []
    for file in sorted(source.rglob("*")):
        relative = file.relative_to(source)
        if file.is_file() and file.suffix.lower() in SUFFIXES and not any(p.startswith(".") for p in relative.parts):
            found.append((file, f"{source.name}/{relative.as_posix()}"))
    return found


def scan(sources: Sequence[Path]) -> tuple[list[KnowledgeDocument], int]:
    """The documents in ``sources`` and how many files were skipped (too big, unreadable, too many)."""
    documents: dict[str, KnowledgeDocument] = {}
    skipped = 0
    for source in sources:
        if not source.exists():
            logger.warning("knowledge source missing", extra={"source": str(source)})
        for file, stored_path in _files(source):
            if len(documents) >= MAX_DOCUMENTS or len(stored_path) > MAX_PATH_CHARS:
                skipped += 1
                continue
            try:
                if file.stat().st_size > MAX_FILE_BYTES:
                    logger.warning("knowledge file too large, skipped", extra={"path": stored_path})
                    skipped += 1
                    continue
                raw = file.read_bytes()
            except OSError:
                logger.warning("knowledge file unreadable, skipped", extra={"path": stored_path})
                skipped += 1
                continue
            content = raw.decode("utf-8", errors="replace").replace("\x00", "")
            documents[stored_path] = KnowledgeDocument(
                path=stored_path,
                title=_title(content, file),
                content=content,
                content_hash=hashlib.sha256(raw).hexdigest(),
            )
    return list(documents.values()), skipped


async def index_knowledge(sessionmaker: async_sessionmaker, knowledge_dir: Path | None = None) -> IndexReport:
    """Start-up entry point: (re)load ``knowledge_dir`` (the defaults when None) into the database."""
    sources = [knowledge_dir] if knowledge_dir is not None else list(DEFAULT_KNOWLEDGE_SOURCES)
    if not any(source.exists() for source in sources):
        logger.warning(
            "knowledge sources not found: knowledge_search answers from what was indexed before (nothing on a new "
            "database); set AGENT_SERVICE_KNOWLEDGE_DIR to a folder of documents",
            extra={"sources": [str(source) for source in sources]},
        )
        return IndexReport(added=0, updated=0, unchanged=0, removed=0, skipped=0)
    documents, skipped = await asyncio.to_thread(scan, sources)
    added = updated = unchanged = 0
    async with transaction(sessionmaker) as session:
        repository = KnowledgeRepository(session)
        existing = await repository.hashes_by_path()
        for document in documents:
            known = existing.get(document.path)
            if known == document.content_hash:
                unchanged += 1
                continue
            await repository.upsert(document)
            if known is None:
                added += 1
            else:
                updated += 1
        removed = await repository.delete_paths(set(existing) - {d.path for d in documents})
    report = IndexReport(added=added, updated=updated, unchanged=unchanged, removed=removed, skipped=skipped)
    logger.info("knowledge indexed", extra={"documents": len(documents), **asdict(report)})
    return report
