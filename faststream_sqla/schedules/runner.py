"""`ScheduleRunner`: writes a broker's declared schedules at start and fires them.

Started only by a broker that declares schedules, so a broker without any adds no
statement to its plain path. Every process that declares a schedule runs one; each
tick is published once however many run, because firing is a compare-and-set on
`next_fire_at` (`drivers.schedules.advance`) in the same transaction as the publish: the process
whose UPDATE matches publishes, the others' match nothing. "Due" is judged by the
database clock, never the process's.

The row decides when a schedule fires (its timing, next_fire_at, paused); the
declaration in this process decides what it publishes (body, headers, options).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from faststream_sqla.drivers import schedules as store
from faststream_sqla.drivers.base import reading, with_retries
from faststream_sqla.drivers.probe import database_now
from faststream_sqla.drivers.schedules import ScheduleRow
from faststream_sqla.parser import CONTENT_TYPE_HEADER

from .declaration import Schedule
from .timing import Missed, Timing

if TYPE_CHECKING:
    from faststream._internal.parser import CodecProto
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from faststream_sqla.drivers import Driver
    from faststream_sqla.health import DatabaseHealth

#: headers of every message a schedule publishes: its name, and the tick it is for
#: (ISO 8601, UTC): a handler can tell a late tick from a current one
SCHEDULE_HEADER = "x-schedule"
TICK_HEADER = "x-schedule-tick"
#: the longest the runner waits before looking again: a pause, resume or delete from
#: another process takes effect within this
POLL_SECONDS = 1.0
#: how long a stopping broker lets a firing in progress commit before cancelling it
STOP_GRACE_SECONDS = 5.0

Publish = Callable[..., Awaitable[Any]]
Log = Callable[[int, str], None]


class ScheduleRunner:
    def __init__(self, schedules: Sequence[Schedule], publish: Publish, log: Log) -> None:
        self.schedules = {s.key: s for s in schedules}
        self._publish = publish
        self._log = log
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._engine: AsyncEngine | None = None
        self._driver: Driver | None = None
        self._health: DatabaseHealth | None = None
        #: ticks this process published, by schedule (read by tests and metrics)
        self.fired: dict[str, int] = dict.fromkeys(self.schedules, 0)

    @property
    def table(self) -> sa.Table:
        assert self._driver is not None
        return self._driver.tables.schedule

    async def start(
        self,
        engine: AsyncEngine,
        driver: Driver,
        codec: CodecProto,
        serializer: Any,
        health: DatabaseHealth,
    ) -> None:
        """Write the declarations (before returning, so a body that cannot be encoded
        fails the start), then fire in the background."""
        self._engine, self._driver, self._health = engine, driver, health
        for schedule in self.schedules.values():
            payload, content_type = await codec.encode(schedule.body, serializer)
            headers = dict(schedule.headers or {})
            if content_type:
                headers.setdefault(CONTENT_TYPE_HEADER, content_type)
            await with_retries(
                driver, functools.partial(self._declare_once, schedule, payload, headers)
            )
        self._stopping.clear()
        self._task = asyncio.create_task(self._run(), name="faststream-sqla schedules")

    async def stop(self) -> None:
        """Let a firing in progress commit (a tick half published is rolled back, and
        fired by the next process that looks), then end the loop."""
        if self._task is None:
            return
        self._stopping.set()
        done, _ = await asyncio.wait({self._task}, timeout=STOP_GRACE_SECONDS)
        if not done:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._task = None

    async def _declare_once(
        self, schedule: Schedule, payload: bytes, headers: dict[str, Any]
    ) -> None:
        try:
            await self._declare(schedule, payload, headers)
        except sa.exc.IntegrityError:
            # another process starting at the same moment inserted it first: update it
            await self._declare(schedule, payload, headers)

    async def _declare(self, schedule: Schedule, payload: bytes, headers: dict[str, Any]) -> None:
        """Insert the schedule, or bring its row up to this declaration. A row whose
        timing changed fires next by the new timing; its paused state, last firing and
        count are kept."""
        assert self._engine is not None and self._driver is not None
        table, timing = self.table, schedule.timing
        definition: dict[str, Any] = {
            "queue": schedule.queue,
            "payload": payload,
            "headers": headers,
            "options": schedule.stored_options,
            "kind": timing.kind.value,
            "every_seconds": timing.every_seconds,
            "cron": timing.cron,
            "timezone": timing.timezone,
            "missed": schedule.policy.value,
            "catch_up_limit": schedule.catch_up_limit,
        }
        async with self._driver.own_transaction(self._engine) as conn:
            now = await database_now(conn)
            row = await store.load_one(conn, table, schedule.key)
            if row is None:
                await store.insert(
                    conn,
                    table,
                    {
                        "name": schedule.key,
                        **definition,
                        "paused": False,
                        "next_fire_at": timing.next_after(now),
                        "fired_count": 0,
                        "created_at": now,
                        "updated_at": now,
                    },
                )
                return
            changed = {k: v for k, v in definition.items() if not _same(getattr(row, k), v)}
            if not changed:
                return
            if _timing_of(row) != timing:
                changed["next_fire_at"] = timing.next_after(now)
            await store.update(conn, table, schedule.key, {**changed, "updated_at": now})

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                wait = await self.fire_due()
            except Exception as e:
                self._failed("Schedules: looking for due schedules failed", e)
                wait = POLL_SECONDS
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), wait)

    def _failed(self, what: str, error: Exception) -> None:
        assert self._health is not None
        if not self._health.noticed(error):  # an outage is logged once, elsewhere
            self._log(logging.ERROR, f"{what}, trying again within a second: {error!r}")

    async def fire_due(self) -> float:
        """Fire every declared schedule that is due; returns how long to wait before
        looking again (until the next one is due, at most POLL_SECONDS)."""
        assert self._engine is not None and self._driver is not None
        async with reading(self._engine) as conn:
            now = await database_now(conn)
            rows = await store.load(conn, self.table, self.schedules)
        upcoming = []
        for row in rows:
            if row.paused:
                continue
            next_fire_at = row.next_fire_at
            if next_fire_at <= now:
                try:
                    next_fire_at = await with_retries(
                        self._driver, functools.partial(self._fire, row, now)
                    )
                except Exception as e:
                    # queue, say) must not hold the others back
                    if self._driver.is_unreachable(e):
                        raise
                    self._failed(f"Schedule {row.name!r}: firing failed", e)
                    continue
            upcoming.append(next_fire_at)
        if not upcoming:
            return POLL_SECONDS
        # the database clock moved on while we fired; the next look is never a busy loop
        until = (min(upcoming) - now).total_seconds()
        return min(POLL_SECONDS, max(until, 0.01))

    async def _fire(self, row: ScheduleRow, now: datetime) -> datetime:
        """Publish the ticks of `row` due at `now`, if this process is the one to;
        returns when the schedule is due next."""
        assert self._engine is not None and self._driver is not None
        schedule = self.schedules[row.name]
        plan = _timing_of(row).due(row.next_fire_at, now, Missed(row.missed), row.catch_up_limit)
        async with self._driver.own_transaction(self._engine) as conn:
            firing = store.ScheduleAdvance(
                name=schedule.key,
                expected=row.next_fire_at,
                next_fire_at=plan.next_fire_at,
                last_fired_at=plan.ticks[-1],
                fired=len(plan.ticks),
            )
            won = await store.advance(conn, self.table, firing)
            if not won:
                return plan.next_fire_at
            for tick in plan.ticks:
                await self._publish_tick(conn, schedule, row.queue, tick)
        self.fired[schedule.key] += len(plan.ticks)
        if plan.skipped:
            self._log(
                logging.WARNING,
                f"Schedule {schedule.key!r}: ticks missed while nothing ran were skipped "
                f"(missed={row.missed!r}); fired {len(plan.ticks)}, the latest for "
                f"{_iso(plan.ticks[-1])}",
            )
        return plan.next_fire_at

    async def _publish_tick(
        self, conn: AsyncConnection, schedule: Schedule, queue: str, tick: datetime
    ) -> None:
        headers = {
            **(schedule.headers or {}),
            SCHEDULE_HEADER: schedule.key,
            TICK_HEADER: _iso(tick),
        }
        options = schedule.delivery_options
        await self._publish(
            schedule.body,
            queue,
            headers=headers,
            connection=conn,
            priority=options.priority,
            ordering_key=options.ordering_key,
            delay=options.delay,
            ttl=options.ttl,
        )


def _timing_of(row: ScheduleRow) -> Timing:
    return Timing.stored(row.kind, row.every_seconds, row.cron, row.timezone)


def _same(stored: Any, declared: Any) -> bool:
    if isinstance(declared, dict):  # JSON: MariaDB may hand back text
        if isinstance(stored, str):
            stored = json.loads(stored)
        return stored == declared
    if isinstance(declared, bytes):
        return bytes(stored) == declared
    return stored == declared


def _iso(tick: datetime) -> str:
    return tick.replace(tzinfo=timezone.utc).isoformat()


__all__ = ["SCHEDULE_HEADER", "TICK_HEADER", "ScheduleRunner"]
