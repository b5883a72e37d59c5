"""Claim index covers the claim's whole ORDER BY (next_attempt_at, id).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22

Messages published together share next_attempt_at, so the claim orders by id too.
PostgreSQL indexes do not carry the primary key implicitly (InnoDB and SQLite ones
do), so without id in the index PostgreSQL sorted every ready row of a queue before
taking the first batch: a scan that grew with the backlog.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

from faststream_sqla.schema import TableNames

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

READY = "state IN ('PENDING', 'RETRYABLE')"


def _replace_claim_index(columns: list[str]) -> None:
    message = context.config.attributes.get("table_names", TableNames()).message
    name = f"ix_{message}_claim"
    op.drop_index(name, table_name=message)
    op.create_index(
        name, message, columns, postgresql_where=sa.text(READY), sqlite_where=sa.text(READY)
    )


def upgrade() -> None:
    _replace_claim_index(["queue", "next_attempt_at", "id"])


def downgrade() -> None:
    _replace_claim_index(["queue", "next_attempt_at"])
