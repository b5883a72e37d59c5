"""The admin API's reads of which queues exist and how each is doing, from index ranges
and bounded counts only: the cost does not grow with the backlog. The same statements
run on every database; the table shapes differ only in the ranges of `ranges.py`.

- Which queues exist: a skip scan, `min(queue) ... WHERE queue > :after`, once per queue
  and per index that holds the queue first (the live ranges of `live_ranges`, and the
  archive's index).
- Each count is `count(*)` over a subquery cut at `cap`; the caller reports a count that
  reaches the cap as inexact.
- Each kind of message is a few ranges of the claim index: the priorities go in as an
  `IN` list (the index's second column), and the not yet due are split into scheduled
  and retrying from one bounded sample of that range. MySQL's message table has no
  partial indexes, so there the generated `ready_at` picks the ranges.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from faststream_sqla.clock import to_aware, utc_now
from faststream_sqla.schema import PRIORITIES, MessageState, QueueTables

from ._claim import state_literal
from .base import TERMINAL
from .ranges import channelled_due_range, claim_index_order, live_ranges, queue_ranges


@dataclass(frozen=True, slots=True)
class QueueFiguresQuery:
    """One queue's figures, each count stopping at `cap`."""

    tables: QueueTables
    queue: str
    cap: int


@dataclass(frozen=True, slots=True)
class QueueFigures:
    """One queue's counts, each at most the query's `cap`; `scheduled` and `retrying`
    share one sample of `later_sampled` rows, also cut at `cap`."""

    ready: int
    scheduled: int
    processing: int
    retrying: int
    waiting: int
    failed_last_hour: int
    handled_last_minute: int
    failed_last_minute: int
    later_sampled: int
    oldest_ready_age: float | None


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
    """Whether `queue` has a live or archived message: one index probe per range."""
    m, a = tables.message, tables.archive
    probes = [
        sa.select(sa.literal_column("1")).where(*where, m.c.queue == queue).limit(1).exists()
        for where in live_ranges(m, apart=False).values()
    ] + [sa.select(sa.literal_column("1")).where(a.c.queue == queue).limit(1).exists()]
    return bool(await conn.scalar(sa.select(sa.or_(*probes))))


def capped_count(query: sa.Select, cap: int) -> sa.ScalarSelect[int]:
    """count(*) of `query`'s rows, stopping at `cap`."""
    return sa.select(sa.func.count()).select_from(query.limit(cap).subquery()).scalar_subquery()


async def count_rows(
    conn: AsyncConnection, table: sa.Table, ranges: Sequence[Sequence[sa.ColumnElement[bool]]]
) -> int:
    """The rows of `table` in `ranges`, all of them (a count reads every row)."""
    total = 0
    for where in ranges:
        total += await conn.scalar(sa.select(sa.func.count()).select_from(table).where(*where)) or 0
    return total


async def queue_figures(conn: AsyncConnection, query: QueueFiguresQuery) -> QueueFigures:
    """How `query.queue` is doing: bounded counts over index ranges."""
    tables, queue, cap = query.tables, query.queue, query.cap
    m, a = tables.message, tables.archive
    one: sa.ColumnClause[Any] = sa.literal_column("1")
    ranges = queue_ranges(m, queue)
    due, claimable = ranges.due, ranges.claimable
    # Not yet due: delayed publishes (PENDING) and retries waiting out their backoff
    # (RETRYABLE), told apart in one bounded sample of that range.
    split: dict[str, int] = {}
    for where in claimable:
        later = sa.select(m.c.state).where(*where, due > utc_now()).limit(cap).subquery()
        counted = await conn.execute(
            sa.select(later.c.state, sa.func.count()).group_by(later.c.state)
        )
        for state, n in counted:
            split[state] = min(cap, split.get(state, 0) + n)
    ready_parts = [
        capped_count(sa.select(one).where(*where, due <= utc_now()), cap) for where in claimable
    ]
    figures = (
        await conn.execute(
            sa.select(
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
                # the last minute's end of the FAILED range read above
                capped_count(
                    sa.select(one).where(
                        a.c.queue == queue,
                        a.c.state == state_literal(MessageState.FAILED),
                        a.c.archived_at >= utc_now(-60),
                    ),
                    cap,
                ),
                *ready_parts,
            )
        )
    ).one()
    processing_n, waiting_n, failed_n, handled_n, failed_minute_n, *ready_ns = figures
    return QueueFigures(
        ready=min(cap, sum(ready_ns)),
        scheduled=split.get(MessageState.PENDING, 0),
        processing=processing_n,
        retrying=split.get(MessageState.RETRYABLE, 0),
        waiting=waiting_n,
        failed_last_hour=failed_n,
        handled_last_minute=handled_n,
        failed_last_minute=failed_minute_n,
        later_sampled=min(cap, sum(split.values())),
        oldest_ready_age=await _oldest_ready_age(conn, tables, queue),
    )


async def _oldest_ready_age(conn: AsyncConnection, tables: QueueTables, queue: str) -> float | None:
    """Seconds since the longest-waiting due message became due: the first entry of each
    priority's range of the claim index."""
    m = tables.message
    due, eligible = claim_index_order(m)
    firsts: list[sa.Select] = [
        sa.select(due.label("due"))
        .where(m.c.queue == queue, m.c.priority == sa.literal_column(str(p)), *eligible)
        .order_by(due)
        .limit(1)
        for p in PRIORITIES
    ]
    channelled = channelled_due_range(m)
    if channelled is not None:
        # the channel index orders by channel before due: the queue's claimable
        # channelled entries are read, not only the first
        firsts.append(
            sa.select(sa.func.min(due).label("due")).where(m.c.queue == queue, *channelled)
        )
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
