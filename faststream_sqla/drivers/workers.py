"""Every statement on the workers table, for the worker registry and the admin API.

Plain SQLAlchemy Core, the same on every database: a process writes only its own row
(found by its random id), so a refresh is an UPDATE and, when that finds no row (pruned
while the process was cut off, or deleted by hand), an INSERT; no upsert is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from faststream_sqla.clock import utc_now
from faststream_sqla.drivers.probe import database_now


@dataclass(frozen=True, slots=True)
class WorkerIdentity:
    """What a worker row says of its process and never changes while it runs."""

    worker_id: str
    host: str
    pid: int
    version: str


@dataclass(frozen=True, slots=True)
class WorkerLoad:
    """What a worker row says of its process's current work, written at each refresh."""

    queues: Sequence[str]
    in_flight: int
    #: the ids of the messages the process holds (claimed, not yet settled)
    holding: Sequence[int]
    #: seconds of silence after which the process counts as gone
    silent_after: float


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """One row as stored; times naive UTC."""

    worker_id: str
    host: str
    pid: int
    queues: Any
    version: str
    started_at: datetime
    last_seen: datetime
    silent_after: float
    in_flight: int
    holding: Any


_COLUMNS = tuple(f.name for f in fields(WorkerRow))


def _load_values(load: WorkerLoad) -> dict[str, Any]:
    return {
        "queues": list(load.queues),
        "in_flight": load.in_flight,
        "holding": list(load.holding),
        "silent_after": load.silent_after,
        "last_seen": utc_now(),
    }


async def register(
    conn: AsyncConnection, table: sa.Table, identity: WorkerIdentity, load: WorkerLoad
) -> None:
    """Insert the process's row; started_at and last_seen are the database's time."""
    await conn.execute(
        sa.insert(table).values(
            worker_id=identity.worker_id,
            host=identity.host,
            pid=identity.pid,
            version=identity.version,
            started_at=utc_now(),
            **_load_values(load),
        )
    )


async def refresh(
    conn: AsyncConnection, table: sa.Table, identity: WorkerIdentity, load: WorkerLoad
) -> bool:
    """Rewrite the process's row with `load` and last_seen = now; insert it again if it
    is gone (then started_at is now too). True when the row was still there."""
    result = await conn.execute(
        sa.update(table).where(table.c.worker_id == identity.worker_id).values(**_load_values(load))
    )
    if result.rowcount == 1:
        return True
    await register(conn, table, identity, load)
    return False


async def forget(conn: AsyncConnection, table: sa.Table, worker_id: str) -> int:
    """Delete the row of `worker_id` (a graceful stop); how many rows went."""
    result = await conn.execute(sa.delete(table).where(table.c.worker_id == worker_id))
    return result.rowcount


async def prune(conn: AsyncConnection, table: sa.Table, silent_for: float) -> int:
    """Delete the rows silent for longer than `silent_for` seconds, by the database
    clock; how many went."""
    result = await conn.execute(
        sa.delete(table).where(
            table.c.last_seen < utc_now(-sa.bindparam("silent_for", silent_for, sa.Float()))
        )
    )
    return result.rowcount


async def load_all(conn: AsyncConnection, table: sa.Table) -> tuple[datetime, list[WorkerRow]]:
    """The database clock and every row, oldest start first: the reader judges each
    row's silence against the same clock that wrote last_seen."""
    now = await database_now(conn)
    query = sa.select(*(table.c[name] for name in _COLUMNS)).order_by(
        table.c.started_at, table.c.worker_id
    )
    return now, [WorkerRow(*row) for row in await conn.execute(query)]
