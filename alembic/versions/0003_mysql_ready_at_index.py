"""MySQL/MariaDB: one index on a generated ready_at replaces the claim and stuck indexes.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22

MySQL has no partial indexes, so its claim index held every row of a queue, in-flight
ones included: each claim walked (and briefly locked) the rows claimed before it, and
the index on acquired_at was rewritten by every claim, archive and purge. A stored
generated column, ready_at (next_attempt_at while the message may be claimed, the last
DATETIME, 9999-12-31 23:59:59, otherwise), indexed as (queue, ready_at, id), serves the
claim (the ready rows, in order, before every in-flight one) and release-stuck (the
in-flight rows: one key). PostgreSQL and SQLite keep their partial indexes: nothing
changes there.

Adding a stored column rebuilds the table on MySQL and MariaDB; on a large queue, run
the upgrade while consumers are stopped.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import context, op
from faststream_sqla.schema import TableNames, Timestamp

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A frozen copy of schema.READY_AT_SQL at this revision.
READY_AT_SQL = (
    "CASE WHEN state IN ('PENDING', 'RETRYABLE') THEN next_attempt_at "
    "ELSE TIMESTAMP'9999-12-31 23:59:59' END"
)


def _applies() -> bool:
    return op.get_context().dialect.name in ("mysql", "mariadb")


def _message_table() -> str:
    return context.config.attributes.get("table_names", TableNames()).message


def upgrade() -> None:
    if not _applies():
        return
    message = _message_table()
    op.add_column(
        message, sa.Column("ready_at", Timestamp, sa.Computed(READY_AT_SQL, persisted=True))
    )
    op.create_index(f"ix_{message}_ready", message, ["queue", "ready_at", "id"])
    op.drop_index(f"ix_{message}_claim", table_name=message)
    op.drop_index(f"ix_{message}_stuck", table_name=message)


def downgrade() -> None:
    if not _applies():
        return
    message = _message_table()
    op.create_index(f"ix_{message}_claim", message, ["queue", "next_attempt_at", "id"])
    op.create_index(f"ix_{message}_stuck", message, ["queue", "acquired_at"])
    op.drop_index(f"ix_{message}_ready", table_name=message)
    op.drop_column(message, "ready_at")
