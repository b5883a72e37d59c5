"""Workers: one row per running broker process.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28

`<message>_workers` holds one row per started broker process
(`faststream_sqla.worker_registry`): a random `worker_id`, its `host` and `pid`, the
`queues` it consumes (JSON), its package `version`, `started_at`, `last_seen` (the
database clock at its last refresh), `silent_after` (seconds of silence after which it
counts as gone), `in_flight` (handlers running) and `holding` (the ids of the messages
it held at `last_seen`, JSON).

Only a new table: workers of the previous version keep running (they do not register).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from alembic import context, op
from faststream_sqla.schema import (
    MAX_HOST_LENGTH,
    MAX_VERSION_LENGTH,
    WORKER_ID_LENGTH,
    TableNames,
    workers_table_name,
)

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _table() -> str:
    return workers_table_name(context.config.attributes.get("table_names", TableNames()).message)


def upgrade() -> None:
    timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
    op.create_table(
        _table(),
        sa.Column("worker_id", sa.String(WORKER_ID_LENGTH), primary_key=True),
        sa.Column("host", sa.String(MAX_HOST_LENGTH), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("queues", sa.JSON(), nullable=False),
        sa.Column("version", sa.String(MAX_VERSION_LENGTH), nullable=False),
        sa.Column("started_at", timestamp, nullable=False),
        sa.Column("last_seen", timestamp, nullable=False),
        sa.Column("silent_after", sa.Float(), nullable=False),
        sa.Column("in_flight", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("holding", sa.JSON(), nullable=False),
        mysql_engine="InnoDB",
    )


def downgrade() -> None:
    op.drop_table(_table())
