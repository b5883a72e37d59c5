"""Channels: limits per channel and per queue, enforced by the claim.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-24

`channel` on the message and archive tables (a published option). The plain claim
leaves channelled messages to the channel claim (`faststream_sqla.channels`), so its
index leaves them out: on PostgreSQL and SQLite the claim index's predicate gains
`channel IS NULL` and a second partial index, `ix_<message>_channel`, holds the ready
messages of channels; on MySQL and MariaDB the generated `ready_at` puts a channel's
ready messages at 9999-12-30, past the plain claim and short of release-stuck's range,
and the keys table gains the channel, under `ix_<message>_channel`.

The controls table gains the limits (per row: its channel, or the whole queue) and
the channel claim's state (rate windows, the rotation, a version that orders claims).

Apply it with the workers stopped: a worker of revision 0013 would claim channelled
messages as plain ones, and its claim no longer matches the rebuilt index.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from alembic import context, op
from faststream_sqla.schema import (
    MAX_KEY_LENGTH,
    TableNames,
    controls_table_name,
    exact_collation,
    keys_table_name,
)

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

READY = "state IN ('PENDING', 'RETRYABLE')"
# Frozen copies of schema.READY_AT_SQL before and at this revision.
READY_AT_BEFORE = (
    "CASE WHEN state IN ('PENDING', 'RETRYABLE') THEN next_attempt_at "
    "ELSE TIMESTAMP'9999-12-31 23:59:59' END"
)
READY_AT_SQL = (
    "CASE WHEN state IN ('PENDING', 'RETRYABLE') AND channel IS NULL THEN next_attempt_at "
    "WHEN state IN ('PENDING', 'RETRYABLE') THEN TIMESTAMP'9999-12-30 00:00:00' "
    "ELSE TIMESTAMP'9999-12-31 23:59:59' END"
)
_CONTROL_COLUMNS = (
    ("max_concurrency", sa.Integer()),
    ("rate_count", sa.Integer()),
    ("rate_period", sa.Float()),
    ("channel_max_concurrency", sa.Integer()),
    ("channel_rate_count", sa.Integer()),
    ("channel_rate_period", sa.Float()),
    ("rate_slot", sa.BigInteger()),
    ("rate_counts", sa.String(200)),
)


def _names() -> TableNames:
    return context.config.attributes.get("table_names", TableNames())


def upgrade() -> None:
    names = _names()
    dialect = op.get_context().dialect
    is_mysql = dialect.name in ("mysql", "mariadb")
    message, archive = names.message, names.archive
    if is_mysql:
        collation = exact_collation(getattr(dialect, "is_mariadb", False))
        key_type: sa.types.TypeEngine = mysql.VARCHAR(
            MAX_KEY_LENGTH, charset="utf8mb4", collation=collation
        )
    else:
        key_type = sa.String(MAX_KEY_LENGTH)
    op.add_column(message, sa.Column("channel", key_type, nullable=True))
    op.add_column(archive, sa.Column("channel", key_type, nullable=True))
    if is_mysql:
        quote = dialect.identifier_preparer.quote
        # the index on ready_at follows the column's new expression
        op.execute(
            f"ALTER TABLE {quote(message)} MODIFY COLUMN ready_at DATETIME(6) "
            f"AS ({READY_AT_SQL}) STORED"
        )
        keys = keys_table_name(message)
        op.add_column(keys, sa.Column("channel", key_type, nullable=True))
        op.create_index(f"ix_{message}_channel", keys, ["queue", "channel", "id"])
    else:
        op.drop_index(f"ix_{message}_claim", table_name=message)
        plain = sa.text(f"{READY} AND channel IS NULL")
        op.create_index(
            f"ix_{message}_claim",
            message,
            ["queue", "priority", "next_attempt_at", "id"],
            postgresql_where=plain,
            sqlite_where=plain,
        )
        channelled = sa.text(f"{READY} AND channel IS NOT NULL")
        op.create_index(
            f"ix_{message}_channel",
            message,
            ["queue", "channel", "next_attempt_at", "id"],
            postgresql_where=channelled,
            sqlite_where=channelled,
        )
    controls = controls_table_name(message)
    for name, type_ in _CONTROL_COLUMNS:
        op.add_column(controls, sa.Column(name, type_))
    op.add_column(controls, sa.Column("rotation", key_type))
    op.add_column(
        controls, sa.Column("version", sa.BigInteger(), nullable=False, server_default="0")
    )


def downgrade() -> None:
    names = _names()
    dialect = op.get_context().dialect
    is_mysql = dialect.name in ("mysql", "mariadb")
    message = names.message
    controls = controls_table_name(message)
    op.drop_column(controls, "version")
    op.drop_column(controls, "rotation")
    for name, _ in reversed(_CONTROL_COLUMNS):
        op.drop_column(controls, name)
    if is_mysql:
        keys = keys_table_name(message)
        op.drop_index(f"ix_{message}_channel", table_name=keys)
        op.drop_column(keys, "channel")
        quote = dialect.identifier_preparer.quote
        op.execute(
            f"ALTER TABLE {quote(message)} MODIFY COLUMN ready_at DATETIME(6) "
            f"AS ({READY_AT_BEFORE}) STORED"
        )
    else:
        op.drop_index(f"ix_{message}_channel", table_name=message)
        op.drop_index(f"ix_{message}_claim", table_name=message)
        ready = sa.text(READY)
        op.create_index(
            f"ix_{message}_claim",
            message,
            ["queue", "priority", "next_attempt_at", "id"],
            postgresql_where=ready,
            sqlite_where=ready,
        )
    op.drop_column(names.archive, "channel")
    op.drop_column(message, "channel")
