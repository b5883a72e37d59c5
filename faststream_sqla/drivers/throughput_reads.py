"""The admin API's read of queues' recent throughput: how many of each queue's messages
were archived (any final state) in each of a few equal spans of time, up to now.

One statement, for every queue asked, of bounded counts over the archive's (queue,
state, archived_at) index: each span is a range of that index, cut at `cap` as the
other figures are, so the cost does not grow with the archive.
The same statement runs on every database."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from faststream_sqla.clock import utc_now
from faststream_sqla.schema import QueueTables

from ._claim import state_literal
from .base import TERMINAL
from .queue_reads import capped_count

#: the most counts one statement selects: SQLite takes at most 2,000 result columns
COUNTS_PER_STATEMENT = 1_200


@dataclass(frozen=True, slots=True)
class ThroughputQuery:
    """For each of `queues`, `spans` spans of `span_seconds` each, the last one ending
    now; counts cut at `cap`."""

    tables: QueueTables
    queues: Sequence[str]
    spans: int
    span_seconds: float
    cap: int


async def archived_per_span(conn: AsyncConnection, query: ThroughputQuery) -> dict[str, list[int]]:
    """Per queue, the messages archived in each span, oldest span first: every queue's
    counts in one statement (several only past COUNTS_PER_STATEMENT counts), all in
    the read's one transaction, so the spans end at the same moment for every queue."""
    a = query.tables.archive
    now = utc_now()
    one: sa.ColumnClause[Any] = sa.literal_column("1")
    final = a.c.state.in_([state_literal(s) for s in TERMINAL])
    bounds = [
        (
            utc_now(-i * query.span_seconds),
            utc_now(-(i - 1) * query.span_seconds) if i > 1 else now,
        )
        for i in range(query.spans, 0, -1)
    ]
    counts = [
        capped_count(
            sa.select(one).where(
                a.c.queue == queue, final, a.c.archived_at >= start, a.c.archived_at < end
            ),
            query.cap,
        )
        for queue in query.queues
        for start, end in bounds
    ]
    found: list[int] = []
    for first in range(0, len(counts), COUNTS_PER_STATEMENT):
        chunk = counts[first : first + COUNTS_PER_STATEMENT]
        found += (await conn.execute(sa.select(*chunk))).one()
    return {
        queue: found[n * query.spans : (n + 1) * query.spans]
        for n, queue in enumerate(query.queues)
    }
