"""A circuit breaker per queue, shared by every process that consumes it.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24

Five columns on `<message>_controls` hold each queue's breaker (keyed (queue, channel),
with channel '' for the queue itself, so a per-channel breaker is one more row), and
`<message>_breaker_events` keeps the history of its changes of state
(`faststream_sqla.subscriber.breaker`).

Both are additions with defaults: workers of revision 0012 keep running while this is
applied and have no breaker until they are upgraded.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from alembic import context, op
from faststream_sqla.schema import (
    BREAKER_PROBE_LENGTH,
    BREAKER_STATE_LENGTH,
    MAX_KEY_LENGTH,
    MAX_QUEUE_NAME_LENGTH,
    TableNames,
    breaker_events_table_name,
    controls_table_name,
    exact_collation,
)

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = (
    "breaker_state", "breaker_failures", "breaker_changed_at", "breaker_reopens_at",
    "breaker_probe",
)


def upgrade() -> None:
    names = context.config.attributes.get("table_names", TableNames())
    dialect = op.get_context().dialect
    is_mysql = dialect.name in ("mysql", "mariadb")
    timestamp = sa.DateTime(timezone=False).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")

    def text(length: int) -> sa.types.TypeEngine:
        if is_mysql:
            # queue names compare byte for byte there too (revision 0008)
            collation = exact_collation(getattr(dialect, "is_mariadb", False))
            return mysql.VARCHAR(length, charset="utf8mb4", collation=collation)
        return sa.String(length)

    controls = controls_table_name(names.message)
    op.add_column(controls, sa.Column("breaker_state", sa.String(BREAKER_STATE_LENGTH)))
    op.add_column(
        controls, sa.Column("breaker_failures", sa.Integer(), nullable=False, server_default="0")
    )
    op.add_column(controls, sa.Column("breaker_changed_at", timestamp))
    op.add_column(controls, sa.Column("breaker_reopens_at", timestamp))
    op.add_column(controls, sa.Column("breaker_probe", sa.String(BREAKER_PROBE_LENGTH)))

    events = breaker_events_table_name(names.message)
    op.create_table(
        events,
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
            autoincrement=True,
        ),
        sa.Column("queue", text(MAX_QUEUE_NAME_LENGTH), nullable=False),
        sa.Column("channel", text(MAX_KEY_LENGTH), nullable=False, server_default=""),
        sa.Column("from_state", sa.String(BREAKER_STATE_LENGTH), nullable=False),
        sa.Column("to_state", sa.String(BREAKER_STATE_LENGTH), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("at", timestamp, nullable=False),
        mysql_engine="InnoDB",
    )
    op.create_index(f"ix_{names.message}_breaker_ev", events, ["queue", "id"])


def downgrade() -> None:
    names = context.config.attributes.get("table_names", TableNames())
    op.drop_table(breaker_events_table_name(names.message))
    for column in reversed(_COLUMNS):
        op.drop_column(controls_table_name(names.message), column)
