"""Archive retention: delete rows older than a cutoff in bounded batches."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from faststream_sqla.drivers import Driver
from faststream_sqla.drivers.base import TERMINAL, reading
from faststream_sqla.drivers.controls import OldArchive, count_old_archive, prune_old_archive
from faststream_sqla.drivers.queue_reads import queue_names
from faststream_sqla.schema import MessageState

from .models import Progress

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
    async with reading(engine) as conn:
        queues = await queue_names(conn, driver.tables, live=False)
    ranges = [
        OldArchive(queue, state, older_than_seconds) for queue in queues for state in ARCHIVE_STATES
    ]
    total = None
    if progress is not None:
        # counted only when someone is listening: a count reads every row it deletes
        async with reading(engine) as conn:
            total = await count_old_archive(conn, driver.tables, ranges)
        progress(0, total)
    deleted = 0
    for old in ranges:
        while (batch := await prune_old_archive(driver, engine, old, batch_size)).found:
            deleted += batch.deleted
            if progress is not None:
                progress(deleted, total)
    return deleted
