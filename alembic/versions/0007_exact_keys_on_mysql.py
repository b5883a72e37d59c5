"""Ordering and idempotency keys compare exactly on MySQL and MariaDB.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24

Revision 0006 gave the key columns the table's default collation, which on MySQL and
MariaDB ignores case and trailing spaces: "Key", "key" and "key " were one idempotency
key (the second publish returned the first's id, or failed) and one ordering key. They
now use the server's binary collation without padding (MariaDB `utf8mb4_nopad_bin`,
MySQL 8 `utf8mb4_0900_bin`), as PostgreSQL and SQLite compare them. Nothing changes on
PostgreSQL and SQLite.

MySQL rebuilds the tables to change a column's collation: on a large queue, run the
upgrade while consumers are stopped.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import context, op
from faststream_sqla.schema import MAX_KEY_LENGTH, TableNames, exact_collation

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEYS = ("ordering_key", "idempotency_key")


def _names() -> TableNames:
    return context.config.attributes.get("table_names", TableNames())


def _set_collation(exact: bool) -> None:
    dialect = op.get_context().dialect
    if dialect.name not in ("mysql", "mariadb"):
        return
    collation = (
        exact_collation(getattr(dialect, "is_mariadb", False)) if exact else "utf8mb4_general_ci"
    )
    names = _names()
    for table in (names.message, names.archive):
        columns = ", ".join(
            f"MODIFY {column} VARCHAR({MAX_KEY_LENGTH}) CHARACTER SET utf8mb4 "
            f"COLLATE {collation} NULL"
            for column in KEYS
        )
        op.execute(f"ALTER TABLE {dialect.identifier_preparer.quote(table)} {columns}")


def upgrade() -> None:
    _set_collation(exact=True)


def downgrade() -> None:
    _set_collation(exact=False)
