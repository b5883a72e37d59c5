"""Message expiry: expires_at on the message and archive tables.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24

A message past its expires_at is never handed to a handler: it is archived with the
state EXPIRED. NULL (every existing row) means it never expires.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import context, op
from faststream_sqla.schema import TableNames, Timestamp

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _names() -> TableNames:
    return context.config.attributes.get("table_names", TableNames())


def upgrade() -> None:
    names = _names()
    for table in (names.message, names.archive):
        op.add_column(table, sa.Column("expires_at", Timestamp, nullable=True))


def downgrade() -> None:
    names = _names()
    for table in (names.archive, names.message):
        op.drop_column(table, "expires_at")
