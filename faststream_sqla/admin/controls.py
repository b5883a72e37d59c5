"""What operators set per queue and each queue's circuit breaker, as the admin API
shows and changes them: pausing, the breakers' statuses and histories, a manual reset.

The statements are in faststream_sqla.drivers.controls; the breaker's decisions are
made in subscriber.breaker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.clock import to_aware
from faststream_sqla.drivers.controls import (
    BreakerChange,
    BreakerDecision,
    BreakerRecord,
    breaker_events,
    breaker_rows,
    change_breaker,
    paused_queues,
    set_paused,
)
from faststream_sqla.schema import WHOLE_QUEUE, BreakerState, QueueTables

from .models import BreakerStatus, BreakerTransition

if TYPE_CHECKING:
    from faststream_sqla.drivers import Driver

__all__ = ["breaker_history", "breaker_statuses", "paused_queues", "reset_breaker", "set_paused"]


async def reset_breaker(
    driver: Driver, engine: AsyncEngine, queue: str, channel: str = WHOLE_QUEUE
) -> bool:
    """Close the breaker of the queue (or of its `channel`), failures forgotten
    ("manual reset"); whether it was anything but CLOSED without failures."""

    def closed(current: BreakerRecord) -> BreakerChange | None:
        if current.state is BreakerState.CLOSED and current.failures == 0:
            return None
        return BreakerChange(BreakerState.CLOSED, 0, reason="manual reset")

    changed = await change_breaker(
        driver, engine, BreakerDecision(queue, closed, create=False, channel=channel)
    )
    return changed is not None and changed[0] != changed[1]


async def breaker_history(
    conn: AsyncConnection,
    tables: QueueTables,
    queue: str,
    limit: int,
    channel: str = WHOLE_QUEUE,
) -> list[BreakerTransition]:
    """The last `limit` changes of state of the queue's breaker (or its `channel`'s),
    newest first."""
    return [
        BreakerTransition(
            event.id, event.from_state, event.to_state, event.reason, to_aware(event.at)
        )
        for event in await breaker_events(conn, tables, queue, limit, channel)
    ]


async def breaker_statuses(
    conn: AsyncConnection, tables: QueueTables, queue: str | None, recent: int
) -> list[BreakerStatus]:
    """Every queue's breaker that ever counted a failure and every channel's that
    counts failures or is not CLOSED (or those of `queue`: its own, CLOSED if it never
    counted one, and its channels'), with their last `recent` changes of state."""
    found = {
        (row.queue, row.channel): row.record for row in await breaker_rows(conn, tables, queue)
    }
    if queue is not None and (queue, WHOLE_QUEUE) not in found:
        found = {(queue, WHOLE_QUEUE): BreakerRecord(), **found}
    return [
        BreakerStatus(
            queue=name,
            state=record.state.value,
            consecutive_failures=record.failures,
            changed_at=to_aware(record.changed_at),
            reopens_at=to_aware(record.reopens_at),
            probe_holder=record.probe,
            recent=await breaker_history(conn, tables, name, recent, channel),
            channel=channel or None,
        )
        for (name, channel), record in found.items()
    ]
