"""control over a running reply: stopped and replaced messages, a turn's stop request

``messages.status`` may be ``stopped`` (the user stopped the reply; its text so far is kept) or
``replaced`` (the user regenerated it: it stays in the history but leaves every prompt and the
page). ``turns.stop_requested_at``: the user asked to stop the turn's reply; whichever replica runs
it sees the flag and ends the message ``stopped``.

Revision ID: c0007_reply_control
Revises: c0006
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "c0007_reply_control"
down_revision = "c0006"
branch_labels = None
depends_on = None

# The name c0001's check got (its name went through the naming convention once more).
STATUS_CHECK = "ck_messages_ck_messages_status"
STATUSES = "status IN ('complete', 'streaming', 'error', 'stopped', 'replaced')"
OLD_STATUSES = "status IN ('complete', 'streaming', 'error')"


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_constraint(op.f(STATUS_CHECK), type_="check")
        batch.create_check_constraint(op.f(STATUS_CHECK), sa.text(STATUSES))
    with op.batch_alter_table("turns") as batch:
        batch.add_column(sa.Column("stop_requested_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    # The schema before c0007 knows neither status: a stopped reply becomes a complete one (its text
    # so far is what the user kept), a replaced one an error (out of prompts, as it was).
    op.execute("UPDATE messages SET status = 'complete' WHERE status = 'stopped'")
    op.execute("UPDATE messages SET status = 'error' WHERE status = 'replaced'")
    with op.batch_alter_table("turns") as batch:
        batch.drop_column("stop_requested_at")
    with op.batch_alter_table("messages") as batch:
        batch.drop_constraint(op.f(STATUS_CHECK), type_="check")
        batch.create_check_constraint(op.f(STATUS_CHECK), sa.text(OLD_STATUSES))
