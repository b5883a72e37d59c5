"""Archive retention: delete rows older than a cutoff in bounded batches."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from faststream_sqla.clock import utc_now
from faststream_sqla.drivers import Driver
from faststream_sqla.drivers._claim import state_literal
from faststream_sqla.drivers.base import TERMINAL, reading
from faststream_sqla.schema import MessageState

from .models import Progress
from .queues import queue_names, start_progress

#: every state an archive row can have
ARCHIVE_STATES = (*TERMINAL, MessageState.REDRIVEN)
PRUNE_BATCH = 1000


async def prune_archive(
    driver: Driver,
    engine: AsyncEngine,
    older_than_seconds: float,
    *,
    batch_size: int = PRUNE_BATCH,
    progress: Progress | None = None,
) -> int:
    """Delete archive rows archived more than `older_than_seconds` ago (database clock),
    `batch_size` ids per transaction, one index range per queue and state, so workers
    keep archiving meanwhile. Returns how many were deleted."""
    a = driver.tables.archive
    cutoff = utc_now(-older_than_seconds)
    async with reading(engine) as conn:
        queues = await queue_names(conn, driver.tables, live=False)
    ranges = [(q, s) for q in queues for s in ARCHIVE_STATES]
    total = await start_progress(
        engine, a, [_old(a, queue, state, cutoff) for queue, state in ranges], progress
    )
    deleted = 0
    for queue, state in ranges:
        while True:
            async with driver.own_transaction(engine) as conn:
                ids = list(
                    (
                        await conn.execute(
                            sa.select(a.c.id)
                            .where(*_old(a, queue, state, cutoff))
                            .order_by(a.c.archived_at)
                            .limit(batch_size)
                        )
                    ).scalars()
                )
                if ids:
                    result = await conn.execute(a.delete().where(a.c.id.in_(ids)))
                    deleted += result.rowcount or 0
            if not ids:
                break
            if progress is not None:
                progress(deleted, total)
    return deleted


def _old(
    a: sa.Table, queue: str, state: MessageState, cutoff: sa.ColumnElement
) -> tuple[sa.ColumnElement[bool], ...]:
    return (
        a.c.queue == queue,
        a.c.state == state_literal(state),
        a.c.archived_at < cutoff,
    )
