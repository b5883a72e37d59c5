"""Topics: bindings of topic patterns to queues, and each message's topic.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25

`<message>_bindings` holds one row per (pattern, queue): a publish to a topic inserts
a copy of the message into each queue whose pattern matches (faststream_sqla.topics).
`root` is the pattern's first word ("" where that is a wildcard), indexed, so a publish
reads only the bindings that may match its topic. On MySQL and MariaDB the pattern,
the queue and the root compare exactly, as queue names do since revision 0008; the
primary key (two columns of 255 four-byte characters) stays under InnoDB's 3072-byte
key limit.

`topic` on the message and archive tables: the topic a copy was published to (NULL
for a publish to a queue). No index: nothing claims or filters by it.

Only a new table and nullable columns: workers of revision 0014 keep running.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from alembic import context, op
from faststream_sqla.schema import MAX_QUEUE_NAME_LENGTH, TableNames, exact_collation

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: frozen copy of topics.MAX_TOPIC_LENGTH at this revision
MAX_TOPIC_LENGTH = 255


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
    bindings = f"{names.message}_bindings"
    op.create_table(
        bindings,
        sa.Column("pattern", exact(MAX_TOPIC_LENGTH), primary_key=True),
        sa.Column("queue", exact(MAX_QUEUE_NAME_LENGTH), primary_key=True),
        sa.Column("root", exact(MAX_TOPIC_LENGTH), nullable=False),
        sa.Column("created_at", timestamp, nullable=False),
        mysql_engine="InnoDB",
    )
    op.create_index(f"ix_{names.message}_binding", bindings, ["root"])
    for table in (names.message, names.archive):
        op.add_column(table, sa.Column("topic", sa.String(MAX_TOPIC_LENGTH), nullable=True))


def downgrade() -> None:
    names = _names()
    for table in (names.archive, names.message):
        op.drop_column(table, "topic")
    bindings = f"{names.message}_bindings"
    op.drop_index(f"ix_{names.message}_binding", table_name=bindings)
    op.drop_table(bindings)
