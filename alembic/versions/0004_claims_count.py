"""A claim token that only goes up: claims_count on the message and archive tables.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24

Outcomes and lease renewals were fenced by deliveries_count, which goes back down when a
message is given back unstarted (a graceful stop): the next claim then had the same
token as the one before, and a late outcome of the earlier claim could settle a message
another worker now held. claims_count is counted up by every claim and never down.
Existing rows start from their deliveries_count, so the claims in flight during the
upgrade keep their tokens. Stop every consumer of the old version before consumers of
the new one start: the two fence by different columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import context, op
from faststream_sqla.schema import TableNames

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _names() -> TableNames:
    return context.config.attributes.get("table_names", TableNames())


def upgrade() -> None:
    names = _names()
    for table in (names.message, names.archive):
        op.add_column(
            table,
            sa.Column("claims_count", sa.Integer(), nullable=False, server_default="0"),
        )
        quoted = op.get_context().dialect.identifier_preparer.quote(table)
        op.execute(sa.text(f"UPDATE {quoted} SET claims_count = deliveries_count"))


def downgrade() -> None:
    names = _names()
    for table in (names.archive, names.message):
        op.drop_column(table, "claims_count")  # SQLite >= 3.35 drops a column in place
