"""Priority, ordering keys and idempotency keys.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24

`priority` (0-10, existing rows 0) joins the claim index after the queue: a claim reads
each priority's ready rows as one range, highest priority first. `ordering_key` gets an
index of (queue, ordering_key, id), which a claim reads to find an earlier message of
the same key. `idempotency_key` gets a unique index on (queue, idempotency_key): among
the messages in the table (waiting, in flight or retrying) a key exists once. Where
partial indexes exist (PostgreSQL, SQLite) the two key indexes leave out the rows
without a key. The archive keeps all three columns, unindexed.

The claim index is rebuilt: on a large queue, run the upgrade while consumers are
stopped. Consumers of the old version do not know the new columns: stop them first.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import context, op
from faststream_sqla.schema import MAX_KEY_LENGTH, TableNames

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

READY = "state IN ('PENDING', 'RETRYABLE')"


def _names() -> TableNames:
    return context.config.attributes.get("table_names", TableNames())


def _is_mysql() -> bool:
    return op.get_context().dialect.name in ("mysql", "mariadb")


def _partial(condition: str) -> dict[str, sa.TextClause]:
    return {} if _is_mysql() else {
        "postgresql_where": sa.text(condition), "sqlite_where": sa.text(condition)
    }


def _replace_claim_index(message: str, columns: list[str]) -> None:
    # MySQL's claim index is the ready_at one (revision 0003)
    name, order = (
        (f"ix_{message}_ready", "ready_at") if _is_mysql() else (f"ix_{message}_claim", "next_attempt_at")
    )
    op.drop_index(name, table_name=message)
    op.create_index(
        name, message, [c if c != "due" else order for c in columns], **_partial(READY)
    )


def upgrade() -> None:
    names = _names()
    for table in (names.message, names.archive):
        op.add_column(
            table, sa.Column("priority", sa.SmallInteger(), nullable=False, server_default="0")
        )
        op.add_column(table, sa.Column("ordering_key", sa.String(MAX_KEY_LENGTH), nullable=True))
        op.add_column(table, sa.Column("idempotency_key", sa.String(MAX_KEY_LENGTH), nullable=True))
    message = names.message
    _replace_claim_index(message, ["queue", "priority", "due", "id"])
    op.create_index(
        f"ix_{message}_ordering", message, ["queue", "ordering_key", "id"],
        **_partial("ordering_key IS NOT NULL"),
    )
    op.create_index(
        f"ux_{message}_idempotency", message, ["queue", "idempotency_key"], unique=True,
        **_partial("idempotency_key IS NOT NULL"),
    )


def downgrade() -> None:
    names = _names()
    message = names.message
    op.drop_index(f"ux_{message}_idempotency", table_name=message)
    op.drop_index(f"ix_{message}_ordering", table_name=message)
    _replace_claim_index(message, ["queue", "due", "id"])
    for table in (names.archive, names.message):
        for column in ("idempotency_key", "ordering_key", "priority"):
            op.drop_column(table, column)  # SQLite >= 3.35 drops a column in place
