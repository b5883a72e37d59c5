"""Which queues exist and how each is doing, as the admin API reports it. The statements
are in `drivers.queue_reads` (index ranges and bounded counts only: the cost does not
grow with the backlog); here the counts become the public models.

Figures: docs/benchmarks.md#admin-reads and docs/benchmarks.md#admin-counts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.drivers.base import reading
from faststream_sqla.drivers.queue_reads import QueueFiguresQuery, queue_figures
from faststream_sqla.drivers.throughput_reads import ThroughputQuery, archived_per_span
from faststream_sqla.schema import QueueTables

from .models import Count, Progress, QueueStats, Throughput

__all__ = ["queue_stats", "queue_throughputs", "start_progress"]


async def start_progress(
    engine: AsyncEngine,
    count: Callable[[AsyncConnection], Awaitable[int]],
    progress: Progress | None,
) -> int | None:
    """Tell `progress` the work ahead: the rows `count` finds, counted only when
    someone is listening (a count reads every row the work will touch)."""
    if progress is None:
        return None
    async with reading(engine) as conn:
        total = await count(conn)
    progress(0, total)
    return total


def _count(value: int, cap: int) -> Count:
    return Count(value, exact=value < cap)


async def queue_stats(
    conn: AsyncConnection, tables: QueueTables, queue: str, cap: int
) -> QueueStats:
    figures = await queue_figures(conn, QueueFiguresQuery(tables, queue, cap))
    later_exact = figures.later_sampled < cap
    return QueueStats(
        queue=queue,
        ready=_count(figures.ready, cap),
        scheduled=Count(figures.scheduled, exact=later_exact),
        processing=_count(figures.processing, cap),
        retrying=Count(figures.retrying, exact=later_exact),
        waiting=_count(figures.waiting, cap),
        failed_last_hour=_count(figures.failed_last_hour, cap),
        oldest_ready_age=figures.oldest_ready_age,
        handled_last_minute=_count(figures.handled_last_minute, cap),
        failed_last_minute=_count(figures.failed_last_minute, cap),
    )


async def queue_throughputs(
    conn: AsyncConnection,
    tables: QueueTables,
    queues: Sequence[str],
    spans: int,
    span_seconds: int,
    cap: int,
) -> list[Throughput]:
    """Each of `queues`' throughput, in one read."""
    query = ThroughputQuery(tables, queues, spans, span_seconds, cap)
    counts = await archived_per_span(conn, query)
    return [Throughput(q, span_seconds, [_count(n, cap) for n in counts[q]]) for q in queues]
