"""The schedules, as the admin API lists and changes them: list, pause, resume,
delete (docs/schedules.md). The statements are in faststream_sqla.drivers.schedules."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from faststream_sqla.clock import to_aware
from faststream_sqla.drivers import schedules as store
from faststream_sqla.drivers.probe import database_now
from faststream_sqla.drivers.schedules import ScheduleRow
from faststream_sqla.exceptions import UnknownScheduleError, shown
from faststream_sqla.schedules.timing import Timing
from faststream_sqla.schema import QueueTables

from .models import ScheduleInfo


def schedule_info(row: ScheduleRow) -> ScheduleInfo:
    options: Any = row.options or {}
    return ScheduleInfo(
        name=row.name,
        queue=row.queue,
        kind=row.kind,
        every_seconds=row.every_seconds,
        cron=row.cron,
        timezone=row.timezone,
        missed=row.missed,
        catch_up_limit=row.catch_up_limit,
        paused=bool(row.paused),
        next_fire_at=to_aware(row.next_fire_at),
        last_fired_at=to_aware(row.last_fired_at),
        fired_count=row.fired_count,
        created_at=to_aware(row.created_at),
        updated_at=to_aware(row.updated_at),
        payload=bytes(row.payload),
        headers=row.headers or {},
        options=options,
    )


async def schedules(conn: AsyncConnection, tables: QueueTables) -> list[ScheduleInfo]:
    return [schedule_info(row) for row in await store.load(conn, tables.schedule)]


async def one(conn: AsyncConnection, tables: QueueTables, name: str) -> ScheduleInfo:
    row = await store.load_one(conn, tables.schedule, name)
    if row is None:
        raise UnknownScheduleError(f"no schedule {shown(name)}")
    return schedule_info(row)


async def set_paused(
    conn: AsyncConnection, tables: QueueTables, name: str, *, paused: bool
) -> ScheduleInfo:
    """Pause, or resume: a resumed schedule fires next at its first tick after now,
    on its own grid, without the ticks it missed while paused."""
    table = tables.schedule
    row = await store.load_one(conn, table, name)
    if row is None:
        raise UnknownScheduleError(f"no schedule {shown(name)}")
    now = await database_now(conn)
    values: dict[str, Any] = {"paused": paused, "updated_at": now}
    if not paused and row.paused:
        timing = Timing.stored(row.kind, row.every_seconds, row.cron, row.timezone)
        values["next_fire_at"] = timing.resumed(row.next_fire_at, now)
    await store.update(conn, table, name, values)
    return await one(conn, tables, name)


async def delete(conn: AsyncConnection, tables: QueueTables, name: str) -> None:
    if not await store.delete(conn, tables.schedule, [name]):
        raise UnknownScheduleError(f"no schedule {shown(name)}")
