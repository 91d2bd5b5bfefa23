"""The Alembic environments of the two service databases (``agent/``, ``conversation/``), shipped in the
wheel so that an installed service finds its revisions."""

from pathlib import Path

MIGRATIONS_DIR = Path(__file__).resolve().parent
