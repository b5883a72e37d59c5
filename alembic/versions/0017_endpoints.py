"""Endpoints: HTTP endpoints that receive signed webhooks, what topics reach them, and
each delivery attempt.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28

`<message>_endpoints` holds one row per endpoint, found by name; the name is also the
endpoint's channel of the delivery queue (`faststream_sqla.webhooks`), whose limits,
pause and breaker stay in the controls table. `<message>_endpoint_topics` has the
bindings table's shape with an endpoint in place of a queue. `<message>_webhook_attempts`
keeps one row per HTTP request of a delivery. On MySQL and MariaDB names, patterns and
roots compare exactly, as queue names do since revision 0008.

Only new tables: workers of revision 0016 keep running.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from alembic import context, op
from faststream_sqla.schema import TableNames, exact_collation

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: frozen copies of the lengths at this revision
MAX_NAME_LENGTH = 255
MAX_TOPIC_LENGTH = 255
MAX_URL_LENGTH = 2048
MAX_SECRET_LENGTH = 255


def _names() -> TableNames:
    return context.config.attributes.get("table_names", TableNames())


def upgrade() -> None:
    names = _names()
    dialect = op.get_context().dialect
    mysql_family = dialect.name in ("mysql", "mariadb")

    def exact(length: int) -> sa.types.TypeEngine:
        if not mysql_family:
            return sa.String(length)
        collation = exact_collation(getattr(dialect, "is_mariadb", False))
        return mysql.VARCHAR(length, charset="utf8mb4", collation=collation)

    timestamp = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
    op.create_table(
        f"{names.message}_endpoints",
        sa.Column("name", exact(MAX_NAME_LENGTH), primary_key=True),
        sa.Column("url", sa.String(MAX_URL_LENGTH), nullable=False),
        sa.Column("secret", sa.String(MAX_SECRET_LENGTH), nullable=False),
        sa.Column("previous_secret", sa.String(MAX_SECRET_LENGTH)),
        sa.Column("previous_secret_until", timestamp),
        sa.Column("timeout", sa.Float(), nullable=False),
        sa.Column("headers", sa.JSON()),
        sa.Column("allow_private", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("retry_schedule", sa.JSON()),
        sa.Column("disabled_at", timestamp),
        sa.Column("disabled_reason", sa.Text()),
        sa.Column("created_at", timestamp, nullable=False),
        sa.Column("updated_at", timestamp, nullable=False),
        mysql_engine="InnoDB",
    )
    topics = f"{names.message}_endpoint_topics"
    op.create_table(
        topics,
        sa.Column("pattern", exact(MAX_TOPIC_LENGTH), primary_key=True),
        sa.Column("endpoint", exact(MAX_NAME_LENGTH), primary_key=True),
        sa.Column("root", exact(MAX_TOPIC_LENGTH), nullable=False),
        sa.Column("created_at", timestamp, nullable=False),
        mysql_engine="InnoDB",
    )
    op.create_index(f"ix_{names.message}_endpoint_topic", topics, ["root"])
    attempts = f"{names.message}_webhook_attempts"
    op.create_table(
        attempts,
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("message_id", sa.BigInteger(), nullable=False),
        sa.Column("endpoint", exact(MAX_NAME_LENGTH), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at", timestamp, nullable=False),
        sa.Column("status", sa.Integer()),
        sa.Column("latency", sa.Float(), nullable=False),
        sa.Column("error", sa.Text()),
        sa.Column("response_body", sa.Text()),
        mysql_engine="InnoDB",
    )
    op.create_index(f"ix_{names.message}_attempt_msg", attempts, ["message_id", "id"])
    op.create_index(f"ix_{names.message}_attempt_ep", attempts, ["endpoint", "id"])


def downgrade() -> None:
    names = _names()
    attempts = f"{names.message}_webhook_attempts"
    op.drop_index(f"ix_{names.message}_attempt_ep", table_name=attempts)
    op.drop_index(f"ix_{names.message}_attempt_msg", table_name=attempts)
    op.drop_table(attempts)
    topics = f"{names.message}_endpoint_topics"
    op.drop_index(f"ix_{names.message}_endpoint_topic", table_name=topics)
    op.drop_table(topics)
    op.drop_table(f"{names.message}_endpoints")
