"""Expand, then contract (docs/architecture.md, "Upgrades"): a migration runs while the previous release's
replicas still serve, so until a later release contracts it, each revision only adds what that release does
not see: tables, indexes, nullable columns or columns with a server default, rows. Anything else (a dropped or
renamed table or column, a changed type, a column made NOT NULL, a new constraint on existing rows) breaks the
replicas still running; such a revision says so with ``CONTRACTS = "<release>"``: it is applied only once
every replica runs that release or a later one, which no longer uses what it removes.

Every revision newer than the last release's heads is read (its ``upgrade()``, statically) and held to this.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from migrations import MIGRATIONS_DIR

# The heads of the last release (810703e, before issue 36): revisions after them are held to the rule.
RELEASED_HEADS = {"agent": "a0006", "conversation": "c0011_turn_trace_context"}
ADDITIVE_CALLS = {"create_table", "create_index", "batch_alter_table", "f", "get_bind", "bulk_insert", "inline_literal"}
ADDITIVE_SQL = re.compile(r"^\s*(CREATE\s+(UNIQUE\s+)?INDEX|CREATE\s+TABLE|UPDATE|INSERT)\b", re.IGNORECASE)


def _sql_of(node: ast.expr) -> str | None:
    """The SQL text of an ``op.execute`` argument when it is a literal (``"..."`` or ``sa.text("...")``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        return node.args[0].value if isinstance(node.args[0].value, str) else None
    return None


def _column_is_additive(column: ast.expr) -> bool:
    if not (isinstance(column, ast.Call) and getattr(column.func, "attr", getattr(column.func, "id", "")) == "Column"):
        return False
    keywords = {k.arg: k.value for k in column.keywords}
    if "primary_key" in keywords:
        return False
    nullable = keywords.get("nullable")
    return nullable is None or (isinstance(nullable, ast.Constant) and nullable.value is True) or "server_default" in keywords


def not_additive(source: str) -> list[str]:
    """What ``upgrade()`` of a revision's source does that is not additive."""
    tree = ast.parse(source)
    (upgrade,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "upgrade"]
    receivers = {"op"} | {item.optional_vars.id for node in ast.walk(upgrade) if isinstance(node, ast.With)
                          for item in node.items if isinstance(item.optional_vars, ast.Name)}
    found = []
    for node in ast.walk(upgrade):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id in receivers):
            continue
        name, batch = node.func.attr, node.func.value.id != "op"
        if name in ADDITIVE_CALLS:
            continue
        if name == "add_column" and node.args and _column_is_additive(node.args[0 if batch else 1 if len(node.args) > 1 else 0]):
            continue
        if name == "execute" and node.args and (sql := _sql_of(node.args[0])) is not None and ADDITIVE_SQL.match(sql):
            continue
        found.append(f"line {node.lineno}: {node.func.value.id}.{name}")
    return found


def contracts(source: str) -> str | None:
    """The release a contracting revision waits for (its module's ``CONTRACTS``), if it says one."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CONTRACTS" for t in node.targets):
            value = node.value
            return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value else None
    return None


def _newer_than_release(database: str) -> list[Path]:
    script = ScriptDirectory(str(MIGRATIONS_DIR / database))
    released = RELEASED_HEADS[database]
    newer = []
    for revision in script.walk_revisions():
        if revision.revision == released:
            return newer
        newer.append(Path(revision.path))
    raise AssertionError(f"{database}: the released head {released} is not in the history")


@pytest.mark.parametrize("database", sorted(RELEASED_HEADS))
def test_each_revision_since_the_release_expands_or_says_which_release_it_contracts_after(database: str) -> None:
    for path in _newer_than_release(database):
        source = path.read_text()
        if contracts(source) is None:
            assert not_additive(source) == [], (
                f"{path.name} is not additive: the previous release's replicas still run while it is applied. "
                "Split it (expand now, contract in a later release) or mark it CONTRACTS = '<release>'")


ADDITIVE = '''
def upgrade():
    op.create_table("owners", sa.Column("id", sa.String(36), primary_key=True))
    op.create_index("ix_owner", "agent_runs", ["owner"])
    op.add_column("agent_runs", sa.Column("owner", sa.String(36), nullable=True))
    op.execute("UPDATE agent_runs SET owner = 'x'")
    with op.batch_alter_table("agent_sessions") as batch:
        batch.add_column(sa.Column("state", sa.String(16), nullable=False, server_default="ACTIVE"))
        batch.add_column(sa.Column("note", sa.Text()))
'''
BREAKING = {
    "drop_column": 'with op.batch_alter_table("t") as b:\n        b.drop_column("c")',
    "alter_column": 'op.alter_column("t", "c", nullable=False)',
    "add_column": 'op.add_column("t", sa.Column("c", sa.Integer(), nullable=False))',
    "drop_table": 'op.drop_table("t")',
    "rename_table": 'op.rename_table("t", "u")',
    "create_check_constraint": 'op.create_check_constraint("ck", "t", "c > 0")',
    "execute": 'op.execute("ALTER TABLE t DROP COLUMN c")',
}


def test_the_reader_tells_additive_from_breaking() -> None:
    assert not_additive(ADDITIVE) == []
    for name, body in BREAKING.items():
        found = not_additive(f"def upgrade():\n    {body}\n")
        assert len(found) == 1 and found[0].endswith(f".{name}"), (name, found)
    assert contracts(f'CONTRACTS = "0.2.0"\ndef upgrade():\n    {BREAKING["drop_table"]}\n') == "0.2.0"
    assert contracts(f"def upgrade():\n    {BREAKING['drop_table']}\n") is None


def test_the_released_history_is_read() -> None:
    """The rule starts at the release: the revisions before it (some replace a check, which this reader cannot
    tell from a narrowing one) are not held to it, and the walk reaches the released heads."""
    assert not_additive((MIGRATIONS_DIR / "conversation" / "versions" / "c0007_reply_control.py").read_text())
    for database in RELEASED_HEADS:
        assert isinstance(_newer_than_release(database), list)
