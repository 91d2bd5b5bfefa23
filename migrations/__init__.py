"""The Alembic environments of the two service databases (``agent/``, ``conversation/``), shipped in the
wheel so that an installed service finds its revisions."""

from pathlib import Path

MIGRATIONS_DIR = Path(__file__).resolve().parent

# Each database's table of its applied revision: the Agent Service's has its own name, so that the two
# services may share one PostgreSQL database; the ConversationService's is Alembic's default.
AGENT_VERSION_TABLE = "alembic_version_agent"
CONVERSATION_VERSION_TABLE = "alembic_version"
