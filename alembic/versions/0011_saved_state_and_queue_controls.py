"""Deferred messages keep a saved state; operators pause queues.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24

`saved_state` (message table only): what a handler saved when it deferred its message
(`SqlaMessage.defer`), read by the next delivery. `<message>_controls`: one row per
queue (and, later, per channel) with what operators set for every consumer of it;
today whether its claims are paused (`faststream-sqla queue pause`).

Both are additions: workers of revision 0010 keep running while this is applied, and
ignore the pause until they are upgraded.
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
    controls_table_name,
    exact_collation,
)

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    names = context.config.attributes.get("table_names", TableNames())
    dialect = op.get_context().dialect
    is_mysql = dialect.name in ("mysql", "mariadb")
    payload = sa.LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb")
    timestamp = sa.DateTime(timezone=False).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
    op.add_column(names.message, sa.Column("saved_state", payload, nullable=True))

    def text(length: int) -> sa.types.TypeEngine:
        if is_mysql:
            # queue names compare byte for byte there too (revision 0008)
            collation = exact_collation(getattr(dialect, "is_mariadb", False))
            return mysql.VARCHAR(length, charset="utf8mb4", collation=collation)
        return sa.String(length)

    op.create_table(
        controls_table_name(names.message),
        sa.Column("queue", text(MAX_QUEUE_NAME_LENGTH), primary_key=True),
        sa.Column("channel", text(MAX_KEY_LENGTH), primary_key=True, server_default=""),
        sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("updated_at", timestamp, nullable=False),
        mysql_engine="InnoDB",
    )


def downgrade() -> None:
    names = context.config.attributes.get("table_names", TableNames())
    op.drop_table(controls_table_name(names.message))
    op.drop_column(names.message, "saved_state")
