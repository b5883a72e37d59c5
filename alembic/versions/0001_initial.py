"""Create the message and message_archive tables.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

A frozen snapshot of faststream_sqla/schema.py at the time: later schema changes are
new revisions, never edits here. Only the column type objects are shared.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

from faststream_sqla.schema import ErrorText, Headers, Id, Payload, State, TableNames, Timestamp

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _names() -> TableNames:
    return context.config.attributes.get("table_names", TableNames())


def _common_columns() -> list[sa.Column]:
    return [
        sa.Column("queue", sa.String(255), nullable=False),
        sa.Column("headers", Headers, nullable=True),
        sa.Column("payload", Payload, nullable=False),
        sa.Column("state", State, nullable=False),
        sa.Column("attempts_count", sa.Integer(), nullable=False),
        sa.Column("deliveries_count", sa.Integer(), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("first_attempt_at", Timestamp, nullable=True),
        sa.Column("last_attempt_at", Timestamp, nullable=True),
        sa.Column("last_error", ErrorText, nullable=True),
        sa.Column("correlation_id", sa.String(255), nullable=True),
    ]


def upgrade() -> None:
    names = _names()
    message, archive = names.message, names.archive
    op.create_table(
        message,
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        *_common_columns(),
        sa.Column("next_attempt_at", Timestamp, nullable=False),
        sa.Column("acquired_at", Timestamp, nullable=True),
        sqlite_autoincrement=True,
    )
    ready = sa.text("state IN ('PENDING', 'RETRYABLE')")
    processing = sa.text("state = 'PROCESSING'")
    op.create_index(
        f"ix_{message}_claim",
        message,
        ["queue", "next_attempt_at"],
        postgresql_where=ready,
        sqlite_where=ready,
    )
    op.create_index(
        f"ix_{message}_stuck",
        message,
        ["queue", "acquired_at"],
        postgresql_where=processing,
        sqlite_where=processing,
    )
    op.create_table(
        archive,
        sa.Column("id", Id, primary_key=True, autoincrement=False),
        *_common_columns(),
        sa.Column("archived_at", Timestamp, nullable=False),
    )
    op.create_index(f"ix_{archive}_queue_archived", archive, ["queue", "archived_at"])


def downgrade() -> None:
    names = _names()
    op.drop_table(names.archive)
    op.drop_table(names.message)
