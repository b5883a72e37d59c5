"""Purging a queue: its waiting messages (`ranges.PURGED`) deleted in batches, each its
own transaction, one index range after the other (`ranges.purge_ranges`). The same
statements run on every database."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.schema import QueueTables

from .queue_reads import count_rows
from .ranges import purge_ranges

if TYPE_CHECKING:
    from .base import Driver


@dataclass(frozen=True, slots=True)
class Purge:
    """Delete `queue`'s waiting messages, `batch_size` rows per transaction."""

    queue: str
    batch_size: int


async def count_waiting(conn: AsyncConnection, tables: QueueTables, queue: str) -> int:
    """How many messages a purge of `queue` would delete now (a count reads them all)."""
    m = tables.message
    return await count_rows(conn, m, [(m.c.queue == queue, *where) for where in purge_ranges(m)])


async def purge_waiting(
    driver: Driver,
    engine: AsyncEngine,
    purge: Purge,
    on_batch: Callable[[int], None] | None = None,
) -> int:
    """Delete the queue's waiting messages; rows a claim has locked are skipped, and
    messages in flight are never touched. `on_batch` hears the running total after each
    batch commits. Returns how many went."""
    m = driver.tables.message
    deleted = 0
    for where in purge_ranges(m):
        while True:
            async with driver.own_transaction(engine) as conn:
                ids = list(
                    (
                        await conn.execute(
                            sa.select(m.c.id)
                            .where(m.c.queue == purge.queue, *where)
                            .limit(purge.batch_size)
                            .with_for_update(skip_locked=True)
                        )
                    ).scalars()
                )
                if not ids:
                    break
                # locked by us: no claim can take them before the delete
                for table in driver.tables.live:  # the key rows first (MySQL)
                    result = await conn.execute(table.delete().where(table.c.id.in_(ids)))
                deleted += result.rowcount or 0
            if on_batch is not None:
                on_batch(deleted)
    return deleted
