"""MySQL and MariaDB keep the message keys in a table of their own.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24

Without partial indexes, the ordering-key and idempotency-key indexes of the message
table (revision 0006) held an entry for every message, keyed or not, and every publish
and archive kept both up. They move to a new table, `<message>_keys`, which holds a row
only for each message that has a key: its id, queue, ordering key and idempotency key
(`schema.build_keys_table`). The rows of keyed messages already queued are copied there.
Nothing changes on PostgreSQL and SQLite, whose partial indexes already leave the
unkeyed messages out.

Consumers and publishers of the old version write keyed messages without their key
rows: stop them before upgrading.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from alembic import context, op
from faststream_sqla.schema import (
    MAX_KEY_LENGTH,
    MAX_QUEUE_NAME_LENGTH,
    TableNames,
    exact_collation,
    keys_table_name,
)

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: the two indexes, by name after the message table: (columns, unique)
INDEXES = {
    "ix_{}_ordering": (["queue", "ordering_key", "id"], False),
    "ux_{}_idempotency": (["queue", "idempotency_key"], True),
}


def _mysql_dialect() -> sa.engine.Dialect | None:
    dialect = op.get_context().dialect
    return dialect if dialect.name in ("mysql", "mariadb") else None


def upgrade() -> None:
    dialect = _mysql_dialect()
    if dialect is None:
        return
    collation = exact_collation(getattr(dialect, "is_mariadb", False))
    message = context.config.attributes.get("table_names", TableNames()).message
    keys = keys_table_name(message)

    def text(length: int) -> mysql.VARCHAR:
        return mysql.VARCHAR(length, charset="utf8mb4", collation=collation)

    op.create_table(
        keys,
        sa.Column("id", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("queue", text(MAX_QUEUE_NAME_LENGTH), nullable=False),
        sa.Column("ordering_key", text(MAX_KEY_LENGTH), nullable=True),
        sa.Column("idempotency_key", text(MAX_KEY_LENGTH), nullable=True),
        mysql_engine="InnoDB",
    )
    for name, (columns, unique) in INDEXES.items():
        op.create_index(name.format(message), keys, columns, unique=unique)
    quote = dialect.identifier_preparer.quote
    op.execute(
        f"INSERT INTO {quote(keys)} (id, queue, ordering_key, idempotency_key) "
        f"SELECT id, queue, ordering_key, idempotency_key FROM {quote(message)} "
        "WHERE ordering_key IS NOT NULL OR idempotency_key IS NOT NULL"
    )
    for name in INDEXES:
        op.drop_index(name.format(message), table_name=message)


def downgrade() -> None:
    if _mysql_dialect() is None:
        return
    message = context.config.attributes.get("table_names", TableNames()).message
    for name, (columns, unique) in INDEXES.items():
        op.create_index(name.format(message), message, columns, unique=unique)
    op.drop_table(keys_table_name(message))
