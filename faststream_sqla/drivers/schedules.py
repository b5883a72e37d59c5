"""Every statement on the schedule table, for the schedule runner and the admin API.

Plain SQLAlchemy Core: each renders on every database, so there is nothing per
database here. Firing is fenced by `advance`, a compare-and-set on `next_fire_at`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """One schedule as stored: its timing (`kind`: interval or cron), what it publishes
    (`payload`, `headers` and the other publish `options`), how it treats missed ticks,
    and its state. Times are naive UTC."""

    name: str
    queue: str
    payload: bytes
    headers: Any
    options: Any
    kind: str
    every_seconds: float | None
    cron: str | None
    timezone: str | None
    missed: str
    catch_up_limit: int
    paused: bool
    next_fire_at: datetime
    last_fired_at: datetime | None
    fired_count: int
    created_at: datetime
    updated_at: datetime


#: the table's columns, in ScheduleRow's order
_COLUMNS = tuple(f.name for f in fields(ScheduleRow))


def _select(table: sa.Table) -> sa.Select:
    return sa.select(*(table.c[name] for name in _COLUMNS))


@dataclass(frozen=True)
class ScheduleAdvance:
    """The firing of a schedule's ticks due at `expected`: its row moves on to
    `next_fire_at`, counting `fired` more ticks, the last at `last_fired_at`."""

    name: str
    expected: datetime
    next_fire_at: datetime
    last_fired_at: datetime
    fired: int


async def load(
    conn: AsyncConnection, table: sa.Table, names: Collection[str] | None = None
) -> list[ScheduleRow]:
    """The schedules named `names` (all when None), by name."""
    query = _select(table).order_by(table.c.name)
    if names is not None:
        query = query.where(table.c.name.in_(sorted(names)))
    return [ScheduleRow(*row) for row in await conn.execute(query)]


async def load_one(conn: AsyncConnection, table: sa.Table, name: str) -> ScheduleRow | None:
    row = (await conn.execute(_select(table).where(table.c.name == name))).first()
    return None if row is None else ScheduleRow(*row)


async def insert(conn: AsyncConnection, table: sa.Table, values: Mapping[str, Any]) -> None:
    await conn.execute(sa.insert(table).values(dict(values)))


async def update(
    conn: AsyncConnection, table: sa.Table, name: str, values: Mapping[str, Any]
) -> bool:
    """Change the row of `name`; False when there is none."""
    result = await conn.execute(sa.update(table).where(table.c.name == name).values(dict(values)))
    return result.rowcount == 1


async def advance(conn: AsyncConnection, table: sa.Table, firing: ScheduleAdvance) -> bool:
    """Claim the firing of a schedule's ticks due at `firing.expected`: move its
    next_fire_at on, unless another process did first (or it was paused or deleted
    meanwhile). The row lock the UPDATE takes holds any other process's attempt until
    this transaction ends, which then matches nothing. True: this transaction fires the
    ticks."""
    result = await conn.execute(
        sa.update(table)
        .where(
            table.c.name == firing.name,
            table.c.next_fire_at == firing.expected,
            table.c.paused == sa.false(),
        )
        .values(
            next_fire_at=firing.next_fire_at,
            last_fired_at=firing.last_fired_at,
            fired_count=table.c.fired_count + firing.fired,
        )
    )
    return result.rowcount == 1


async def delete(conn: AsyncConnection, table: sa.Table, names: Sequence[str]) -> int:
    result = await conn.execute(sa.delete(table).where(table.c.name.in_(list(names))))
    return result.rowcount
