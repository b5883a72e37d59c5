"""Which queues exist and how each is doing, from index ranges and bounded counts only:
the cost does not grow with the backlog.

- Which queues exist: a skip scan, `min(queue) ... WHERE queue > :after`, once per queue
  and per index that holds the queue first (the live ranges of
  `drivers.ranges.live_ranges`, and the archive's index).
- Each count is `count(*)` over a subquery cut at `cap` (the admin API's `exact_up_to`),
  reported as inexact when it reaches the cap.
- Each kind of message is a few ranges of the claim index: the priorities go in as an
  `IN` list (the index's second column), and the not yet due are split into scheduled
  and retrying from one bounded sample of that range. MySQL's message table has no
  partial indexes, so there the generated `ready_at` picks the ranges.

Figures: docs/benchmarks.md#admin-reads and docs/benchmarks.md#admin-counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.clock import to_aware, utc_now
from faststream_sqla.drivers._claim import state_literal
from faststream_sqla.drivers.base import TERMINAL, reading
from faststream_sqla.drivers.ranges import claim_index_order, live_ranges, queue_ranges
from faststream_sqla.schema import PRIORITIES, MessageState, QueueTables

from .models import Count, Progress, QueueStats


async def queue_names(
    conn: AsyncConnection, tables: QueueTables, *, live: bool = True, archived: bool = True
) -> list[str]:
    """Every queue with a live (if `live`) or archived (if `archived`) message, in name
    order: a skip scan, one index probe per queue and index."""
    m, a = tables.message, tables.archive
    found: set[str] = set()
    sources = [(m, w) for w in live_ranges(m, apart=False).values()] if live else []
    for table, where in sources + ([(a, ())] if archived else []):
        after = ""
        while True:
            name = await conn.scalar(
                sa.select(sa.func.min(table.c.queue)).where(*where, table.c.queue > after)
            )
            if name is None:
                break
            found.add(name)
            after = name
    return sorted(found)


async def queue_exists(conn: AsyncConnection, tables: QueueTables, queue: str) -> bool:
    m, a = tables.message, tables.archive
    probes = [
        sa.select(sa.literal_column("1")).where(*where, m.c.queue == queue).limit(1).exists()
        for where in live_ranges(m, apart=False).values()
    ] + [sa.select(sa.literal_column("1")).where(a.c.queue == queue).limit(1).exists()]
    return bool(await conn.scalar(sa.select(sa.or_(*probes))))


def capped_count(query: sa.Select, cap: int) -> sa.ScalarSelect[int]:
    """count(*) of `query`'s rows, stopping at `cap`."""
    return sa.select(sa.func.count()).select_from(query.limit(cap).subquery()).scalar_subquery()


async def start_progress(
    engine: AsyncEngine,
    table: sa.Table,
    ranges: Sequence[Sequence[sa.ColumnElement[bool]]],
    progress: Progress | None,
) -> int | None:
    """Tell `progress` the work ahead: the rows of `ranges`, counted only when someone
    is listening (a count reads every row the work will touch)."""
    if progress is None:
        return None
    async with reading(engine) as conn:
        total = 0
        for where in ranges:
            total += (
                await conn.scalar(sa.select(sa.func.count()).select_from(table).where(*where)) or 0
            )
    progress(0, total)
    return total


def _count(value: int, cap: int) -> Count:
    return Count(value, exact=value < cap)


async def queue_stats(
    conn: AsyncConnection, tables: QueueTables, queue: str, cap: int
) -> QueueStats:
    m, a = tables.message, tables.archive
    one: sa.ColumnClause[Any] = sa.literal_column("1")
    ranges = queue_ranges(m, queue)
    due, claimable = ranges.due, ranges.claimable
    # Not yet due: delayed publishes (PENDING) and retries waiting out their backoff
    # (RETRYABLE), told apart in one bounded sample of that range.
    later = sa.select(m.c.state).where(*claimable, due > utc_now()).limit(cap).subquery()
    counted = await conn.execute(sa.select(later.c.state, sa.func.count()).group_by(later.c.state))
    split = {state: n for state, n in counted}
    later_exact = sum(split.values()) < cap
    figures = (
        await conn.execute(
            sa.select(
                capped_count(sa.select(one).where(*claimable, due <= utc_now()), cap),
                capped_count(sa.select(one).where(*ranges.processing), cap),
                capped_count(sa.select(one).where(*ranges.waiting), cap),
                capped_count(
                    sa.select(one).where(
                        a.c.queue == queue,
                        a.c.state == state_literal(MessageState.FAILED),
                        a.c.archived_at >= utc_now(-3600),
                    ),
                    cap,
                ),
                capped_count(
                    sa.select(one).where(
                        a.c.queue == queue,
                        a.c.state.in_([state_literal(s) for s in TERMINAL]),
                        a.c.archived_at >= utc_now(-60),
                    ),
                    cap,
                ),
            )
        )
    ).one()
    ready_n, processing_n, waiting_n, failed_n, handled_n = figures
    return QueueStats(
        queue=queue,
        ready=_count(ready_n, cap),
        scheduled=Count(split.get(MessageState.PENDING, 0), exact=later_exact),
        processing=_count(processing_n, cap),
        retrying=Count(split.get(MessageState.RETRYABLE, 0), exact=later_exact),
        waiting=_count(waiting_n, cap),
        failed_last_hour=_count(failed_n, cap),
        oldest_ready_age=await _oldest_ready_age(conn, tables, queue),
        handled_last_minute=_count(handled_n, cap),
    )


async def _oldest_ready_age(conn: AsyncConnection, tables: QueueTables, queue: str) -> float | None:
    """Seconds since the longest-waiting due message became due: the first entry of each
    priority's range of the claim index."""
    m = tables.message
    due, eligible = claim_index_order(m)
    firsts: Sequence[sa.Select] = [
        sa.select(due.label("due"))
        .where(m.c.queue == queue, m.c.priority == sa.literal_column(str(p)), *eligible)
        .order_by(due)
        .limit(1)
        for p in PRIORITIES
    ]
    # each branch its own subquery: SQLite wants a compound's LIMIT outside it
    branches = [sa.select(b.subquery().c.due) for b in firsts]
    every = sa.union_all(*branches).subquery()
    row = (
        await conn.execute(
            sa.select(sa.func.min(every.c.due), utc_now()).where(every.c.due <= utc_now())
        )
    ).one()
    oldest, now = row
    if oldest is None:
        return None
    return max(0.0, (to_aware(now) - to_aware(oldest)).total_seconds())
