"""What operators set per queue (the controls table): reading and changing it.

Workers read it through `paused_among` every few seconds (subscriber.loops.
ControlWatcher); the admin API and the CLI change it through `set_paused`.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.clock import utc_now
from faststream_sqla.schema import WHOLE_QUEUE, QueueTables


async def paused_among(conn: AsyncConnection, tables: QueueTables, queues: Sequence[str]) -> set[str]:
    """Which of `queues` are paused: one primary-key lookup per queue."""
    c = tables.controls
    result = await conn.execute(
        sa.select(c.c.queue).where(
            c.c.queue.in_(list(queues)), c.c.channel == WHOLE_QUEUE, c.c.paused
        )
    )
    return set(result.scalars())


async def paused_queues(conn: AsyncConnection, tables: QueueTables) -> list[str]:
    """Every paused queue, by name."""
    c = tables.controls
    result = await conn.execute(
        sa.select(c.c.queue).where(c.c.channel == WHOLE_QUEUE, c.c.paused).order_by(c.c.queue)
    )
    return list(result.scalars())


async def set_paused(engine: AsyncEngine, tables: QueueTables, queue: str, paused: bool) -> bool:
    """Pause or resume `queue`; whether that changed anything. A queue without a row
    runs, so the first pause inserts one (each database's own upsert would be three
    statements to keep; a pause is rare)."""
    c = tables.controls
    if paused:
        try:
            async with engine.begin() as conn:
                await conn.execute(
                    c.insert().values(
                        queue=queue, channel=WHOLE_QUEUE, paused=True, updated_at=utc_now()
                    )
                )
            return True
        except sa.exc.IntegrityError:
            pass  # the queue has a row: update it
    async with engine.begin() as conn:
        changed = await conn.execute(
            c.update()
            .where(c.c.queue == queue, c.c.channel == WHOLE_QUEUE, c.c.paused != paused)
            .values(paused=paused, updated_at=utc_now())
        )
    return changed.rowcount > 0
