"""Interval and cron schedules get a table of their own.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24

`<message>_schedule` holds one row per schedule declared with `broker.schedule(...)`:
the message it publishes (queue, payload, headers, other publish options as JSON), its
timing (`kind` interval or cron, `every_seconds`, `cron`, `timezone`), what to do with
ticks missed while nothing ran (`missed`, `catch_up_limit`), whether it is `paused`,
and when it fires next (`next_fire_at`, naive UTC like every other time). On MySQL and
MariaDB the name and queue compare exactly, as queue names do since revision 0008.

Only a new table: workers of the previous version keep running.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from alembic import context, op
from faststream_sqla.schema import (
    MAX_CRON_LENGTH,
    MAX_QUEUE_NAME_LENGTH,
    MAX_SCHEDULE_NAME_LENGTH,
    MAX_TIMEZONE_LENGTH,
    TableNames,
    exact_collation,
    schedule_table_name,
)

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _table() -> str:
    return schedule_table_name(context.config.attributes.get("table_names", TableNames()).message)


def upgrade() -> None:
    dialect = op.get_context().dialect
    mysql_family = dialect.name in ("mysql", "mariadb")

    def exact(length: int) -> sa.types.TypeEngine:
        if not mysql_family:
            return sa.String(length)
        collation = exact_collation(getattr(dialect, "is_mariadb", False))
        return mysql.VARCHAR(length, charset="utf8mb4", collation=collation)

    timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
    op.create_table(
        _table(),
        sa.Column("name", exact(MAX_SCHEDULE_NAME_LENGTH), primary_key=True),
        sa.Column("queue", exact(MAX_QUEUE_NAME_LENGTH), nullable=False),
        sa.Column(
            "payload",
            sa.LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb"),
            nullable=False,
        ),
        sa.Column("headers", sa.JSON(), nullable=True),
        sa.Column("options", sa.JSON(), nullable=True),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("every_seconds", sa.Double(), nullable=True),
        sa.Column("cron", sa.String(MAX_CRON_LENGTH), nullable=True),
        sa.Column("timezone", sa.String(MAX_TIMEZONE_LENGTH), nullable=True),
        sa.Column("missed", sa.String(16), nullable=False),
        sa.Column("catch_up_limit", sa.Integer(), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("next_fire_at", timestamp, nullable=False),
        sa.Column("last_fired_at", timestamp, nullable=True),
        sa.Column("fired_count", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("created_at", timestamp, nullable=False),
        sa.Column("updated_at", timestamp, nullable=False),
        mysql_engine="InnoDB",
    )


def downgrade() -> None:
    op.drop_table(_table())
