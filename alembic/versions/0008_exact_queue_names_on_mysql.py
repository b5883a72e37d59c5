"""Queue names compare exactly on MySQL and MariaDB.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24

As with the keys (revision 0007), the `queue` column had the table's default collation
on MySQL and MariaDB, which ignores case and trailing spaces: a subscriber of "orders"
also took the messages of "Orders" and "orders ", which PostgreSQL and SQLite keep apart.
The column now uses the binary collation without padding on both tables. Nothing
changes on PostgreSQL and SQLite.

MySQL rebuilds the tables and every index that holds the queue: on a large queue, run
the upgrade while consumers are stopped.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import context, op
from faststream_sqla.schema import MAX_QUEUE_NAME_LENGTH, TableNames, exact_collation

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _set_collation(exact: bool) -> None:
    dialect = op.get_context().dialect
    if dialect.name not in ("mysql", "mariadb"):
        return
    collation = (
        exact_collation(getattr(dialect, "is_mariadb", False)) if exact else "utf8mb4_general_ci"
    )
    names: TableNames = context.config.attributes.get("table_names", TableNames())
    for table in (names.message, names.archive):
        op.execute(
            f"ALTER TABLE {dialect.identifier_preparer.quote(table)} MODIFY queue "
            f"VARCHAR({MAX_QUEUE_NAME_LENGTH}) CHARACTER SET utf8mb4 COLLATE {collation} NOT NULL"
        )


def upgrade() -> None:
    _set_collation(exact=True)


def downgrade() -> None:
    _set_collation(exact=False)
