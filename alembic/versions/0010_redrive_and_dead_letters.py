"""Redrive and replay leave an audit trail; the archive index finds dead letters.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24

`redriven_from` (both tables): the archived message a redrive or replay copied a new
message from. `redriven_to` (archive only): on a `REDRIVEN` archive row, the id of that
new message. The archive index `(queue, archived_at)` becomes `(queue, state,
archived_at)`, renamed `ix_<archive>_queue_state`: a page of dead letters (`FAILED`,
`EXPIRED`) is then one range per queue, however many completed rows surround it, and
the archive keeps one index to maintain per archived message.

The archive index is rebuilt: on a large archive this takes a while; workers may keep
running (the new columns are nullable, and old workers never write them).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import context, op
from faststream_sqla.schema import TableNames

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _names() -> TableNames:
    return context.config.attributes.get("table_names", TableNames())


def _id() -> sa.types.TypeEngine:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    names = _names()
    for table in (names.message, names.archive):
        op.add_column(table, sa.Column("redriven_from", _id(), nullable=True))
    op.add_column(names.archive, sa.Column("redriven_to", _id(), nullable=True))
    op.drop_index(f"ix_{names.archive}_queue_archived", table_name=names.archive)
    op.create_index(
        f"ix_{names.archive}_queue_state", names.archive, ["queue", "state", "archived_at"]
    )


def downgrade() -> None:
    names = _names()
    op.drop_index(f"ix_{names.archive}_queue_state", table_name=names.archive)
    op.create_index(f"ix_{names.archive}_queue_archived", names.archive, ["queue", "archived_at"])
    op.drop_column(names.archive, "redriven_to")
    for table in (names.message, names.archive):
        op.drop_column(table, "redriven_from")
