"""The running broker processes, as the admin API lists them, and which of them holds a
message (docs/operations.md#workers-who-is-running). The statements are in
`faststream_sqla.drivers.workers`; here is the judgement alive or gone, by the database
clock, and the public models."""

from __future__ import annotations

import math
from collections.abc import Collection
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from faststream_sqla.clock import to_aware
from faststream_sqla.drivers import workers as store
from faststream_sqla.drivers.workers import WorkerRow
from faststream_sqla.exceptions import InvalidOptionError, shown
from faststream_sqla.schema import QueueTables
from faststream_sqla.worker_registry import PRUNE_AFTER

from .models import WorkerInfo

ALIVE, GONE = "alive", "gone"
#: the shortest silence `gone_after` may name, in seconds
MIN_GONE_AFTER = 0.1


def checked_gone_after(value: object) -> float | None:
    """None (each worker's own `silent_after`) or seconds from MIN_GONE_AFTER to
    PRUNE_AFTER, after which a silent row is deleted anyway."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not MIN_GONE_AFTER <= value <= PRUNE_AFTER
    ):
        msg = (
            f"gone_after must be None or a number of seconds from {MIN_GONE_AFTER:g} to "
            f"{PRUNE_AFTER:g}, got {shown(value)}"
        )
        raise InvalidOptionError(msg)
    return float(value)


def _listed(value: object) -> list:
    return list(value) if isinstance(value, (list, tuple)) else []


def worker_info(row: WorkerRow, now: datetime, gone_after: float | None) -> WorkerInfo:
    threshold = row.silent_after if gone_after is None else gone_after
    silent_for = max(0.0, (now - row.last_seen).total_seconds())
    return WorkerInfo(
        worker_id=row.worker_id,
        host=row.host,
        pid=row.pid,
        queues=[str(q) for q in _listed(row.queues)],
        version=row.version,
        started_at=to_aware(row.started_at),
        last_seen=to_aware(row.last_seen),
        silent_for=silent_for,
        status=GONE if silent_for > threshold else ALIVE,
        gone_after=threshold,
        in_flight=row.in_flight,
        holding=[int(i) for i in _listed(row.holding)],
    )


async def workers(
    conn: AsyncConnection, tables: QueueTables, gone_after: float | None
) -> list[WorkerInfo]:
    now, rows = await store.load_all(conn, tables.workers)
    return [worker_info(row, now, gone_after) for row in rows]


async def holders(
    conn: AsyncConnection, tables: QueueTables, ids: Collection[int]
) -> dict[int, str]:
    """For each of `ids` some worker's row lists as held, that worker's id: the one seen
    last where two do (a message taken back from a dead worker and claimed again)."""
    wanted = set(ids)
    if not wanted:
        return {}
    _, rows = await store.load_all(conn, tables.workers)
    found: dict[int, str] = {}
    for row in sorted(rows, key=lambda r: r.last_seen):
        for held in _listed(row.holding):
            if held in wanted:
                found[int(held)] = row.worker_id
    return found
