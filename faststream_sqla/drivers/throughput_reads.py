"""The admin API's read of a queue's recent throughput: how many of its messages were
archived (any final state) in each of a few equal spans of time, up to now.

One statement of bounded counts over the archive's (queue, state, archived_at) index:
each span is a range of that index, cut at `cap` as the other figures are, so the cost
does not grow with the archive. The same statement runs on every database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from faststream_sqla.clock import utc_now
from faststream_sqla.schema import QueueTables

from ._claim import state_literal
from .base import TERMINAL
from .queue_reads import capped_count


@dataclass(frozen=True, slots=True)
class ThroughputQuery:
    """`spans` spans of `span_seconds` each, the last one ending now; counts cut at `cap`."""

    tables: QueueTables
    queue: str
    spans: int
    span_seconds: float
    cap: int


async def archived_per_span(conn: AsyncConnection, query: ThroughputQuery) -> list[int]:
    """The messages of `query.queue` archived in each span, oldest span first."""
    a = query.tables.archive
    now = utc_now()
    one: sa.ColumnClause[Any] = sa.literal_column("1")
    final = a.c.state.in_([state_literal(s) for s in TERMINAL])
    counts = []
    for i in range(query.spans, 0, -1):
        start = utc_now(-i * query.span_seconds)
        end = utc_now(-(i - 1) * query.span_seconds) if i > 1 else now
        counts.append(
            capped_count(
                sa.select(one).where(
                    a.c.queue == query.queue, final, a.c.archived_at >= start, a.c.archived_at < end
                ),
                query.cap,
            )
        )
    return list((await conn.execute(sa.select(*counts))).one())
