"""Every statement on the bindings table: bind, unbind, list, and the read a publish
to a topic makes in its own transaction.

SQLAlchemy Core; only the idempotent insert differs per database (each one's way to
skip a row whose key is already there). The callers check patterns and queue names
first (faststream_sqla.topics, schema.validate_queue_name).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from faststream_sqla.clock import utc_now
from faststream_sqla.schema import DELIVERY_QUEUE, MYSQL_FAMILY, QueueTables
from faststream_sqla.topics import pattern_root, topic_root


@dataclass(frozen=True, slots=True)
class BindingRow:
    """One binding as stored: messages published to a topic `pattern` matches are
    copied into `queue`. `created_at` is naive UTC."""

    pattern: str
    queue: str
    created_at: datetime


def _insert_skipping_existing(conn: AsyncConnection, table: sa.Table) -> sa.Insert:
    """An INSERT that leaves out rows whose primary key is taken, so two processes
    binding the same pair at once both succeed."""
    name = conn.dialect.name
    if name in MYSQL_FAMILY:
        # the values are checked before, so IGNORE has nothing else to pass over
        return mysql.insert(table).prefix_with("IGNORE")
    if name == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing()
    return sqlite.insert(table).on_conflict_do_nothing()


async def bind(
    conn: AsyncConnection, tables: QueueTables, bindings: Sequence[tuple[str, str]]
) -> int:
    """Store (pattern, queue) `bindings`, those already stored left as they are; how
    many were new."""
    if not bindings:
        return 0
    b = tables.bindings
    rows = [
        {"pattern": pattern, "queue": queue, "root": pattern_root(pattern)}
        for pattern, queue in dict.fromkeys(bindings)
    ]
    result = await conn.execute(
        _insert_skipping_existing(conn, b).values(created_at=utc_now()), rows
    )
    return max(result.rowcount, 0)


async def unbind(conn: AsyncConnection, tables: QueueTables, pattern: str, queue: str) -> bool:
    """Remove one binding; whether it existed."""
    b = tables.bindings
    result = await conn.execute(b.delete().where(b.c.pattern == pattern, b.c.queue == queue))
    return result.rowcount > 0


async def bindings(
    conn: AsyncConnection,
    tables: QueueTables,
    *,
    queue: str | None = None,
    pattern: str | None = None,
) -> list[BindingRow]:
    """The bindings, by pattern then queue; only `queue`'s or `pattern`'s if given."""
    b = tables.bindings
    stmt = sa.select(b.c.pattern, b.c.queue, b.c.created_at).order_by(b.c.pattern, b.c.queue)
    if queue is not None:
        stmt = stmt.where(b.c.queue == queue)
    if pattern is not None:
        stmt = stmt.where(b.c.pattern == pattern)
    result = await conn.execute(stmt)
    return [BindingRow(*row) for row in result]


async def candidate_targets(
    conn: AsyncConnection,
    tables: QueueTables,
    topic: str,
    latest: Callable[[sa.Select], sa.Select],
) -> list[tuple[str, str, str | None]]:
    """The (pattern, queue, channel) bindings and endpoint topics that may match `topic`
    (their root is its first word, or they start with a wildcard), in one statement:
    channel None for a bound queue, the endpoint's name (its channel of the delivery
    queue) for an enabled endpoint. In the caller's transaction; `latest` is the
    driver's `latest_rows`: a row committed before this read is seen even in a
    transaction whose snapshot is older (MySQL's REPEATABLE READ), and the read holds
    the rows it found until the publish commits, so no unbind slips in between."""
    b, t, e = tables.bindings, tables.endpoint_topics, tables.endpoints
    roots = [topic_root(topic), ""]
    queues = sa.select(b.c.pattern, b.c.queue, sa.null().label("channel")).where(
        b.c.root.in_(roots)
    )
    endpoints = (
        sa.select(
            t.c.pattern,
            sa.literal(DELIVERY_QUEUE, type_=b.c.queue.type).label("queue"),
            t.c.endpoint.label("channel"),
        )
        .join(e, e.c.name == t.c.endpoint)
        .where(t.c.root.in_(roots), e.c.disabled_at.is_(None))
    )
    parts = [latest(queues), latest(endpoints)]
    if conn.dialect.name != "sqlite":
        # a locking read inside a UNION needs its parentheses (SQLite takes none)
        parts = [part.self_group() for part in parts]  # type: ignore[misc]
    result = await conn.execute(sa.union_all(*parts))
    return [(pattern, queue, channel) for pattern, queue, channel in result]
