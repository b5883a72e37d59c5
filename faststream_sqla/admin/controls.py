"""What operators set per queue and each queue's circuit breaker (the controls table,
and the breakers' history): reading and changing them.

Workers read it through `paused_among`, or `controls_among` when they have a breaker,
every few seconds (subscriber.upkeep.ControlWatcher); the admin API and the CLI change it
through `set_paused` and `reset_breaker`. The breaker's decisions are made in
subscriber.breaker; the statements that apply them are here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.clock import to_aware, utc_now
from faststream_sqla.drivers.base import reading
from faststream_sqla.drivers.ranges import channelled_range
from faststream_sqla.ordering import IDS_PER_STATEMENT
from faststream_sqla.schema import WHOLE_QUEUE, BreakerState, QueueTables

from .models import BreakerStatus, BreakerTransition

if TYPE_CHECKING:
    from faststream_sqla.drivers import Driver


async def paused_among(
    conn: AsyncConnection, tables: QueueTables, queues: Sequence[str]
) -> set[str]:
    """Which of `queues` are paused: one primary-key lookup per queue."""
    c = tables.controls
    result = await conn.execute(
        sa.select(c.c.queue).where(
            c.c.queue.in_(list(queues)), c.c.channel == WHOLE_QUEUE, c.c.paused
        )
    )
    return set(result.scalars())


async def channelled_among(
    conn: AsyncConnection, tables: QueueTables, queues: Sequence[str]
) -> set[str]:
    """Which of `queues` the channel claim serves (faststream_sqla.channels): those with
    a limit or a paused channel in this table, and those with messages of a channel
    waiting (one index probe per queue)."""
    c = tables.controls
    found = set(
        (
            await conn.execute(
                sa.select(c.c.queue)
                .where(
                    c.c.queue.in_(list(queues)),
                    # a setting, not the claims' own state (rate windows, rotation):
                    # with every limit removed the queue goes back to the plain claim
                    sa.or_(
                        sa.and_(c.c.channel != WHOLE_QUEUE, c.c.paused),
                        c.c.max_concurrency.isnot(None),
                        c.c.rate_count.isnot(None),
                        c.c.channel_max_concurrency.isnot(None),
                        c.c.channel_rate_count.isnot(None),
                    ),
                )
                .distinct()
            )
        ).scalars()
    )
    source, waiting = channelled_range(tables)
    for queue in queues:
        if queue not in found and await conn.scalar(
            sa.select(sa.exists().where(source.c.queue == queue, *waiting))
        ):
            found.add(queue)
    return found


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


# -- circuit breakers (subscriber.breaker decides; these statements read and write) --


@dataclass(frozen=True)
class BreakerRecord:
    """One queue's breaker as its control row holds it (no row: CLOSED, no failures)."""

    state: BreakerState = BreakerState.CLOSED
    failures: int = 0
    changed_at: datetime | None = None
    reopens_at: datetime | None = None
    probe: str | None = None


@dataclass(frozen=True)
class BreakerChange:
    """What a decision writes: the new state, failure count and probe holder; `opens`
    sets `breaker_reopens_at` to the database's time plus `cooldown`; a `reason`
    records a change of state in the history."""

    state: BreakerState
    failures: int
    probe: str | None = None
    opens: bool = False
    cooldown: float = 0.0
    reason: str | None = None


@dataclass(frozen=True)
class ControlReading:
    """What a worker reads of one queue each turn (ControlWatcher)."""

    paused: bool
    breaker: BreakerRecord
    #: OPEN and its reopening time has come, on the database's clock
    reopening_due: bool
    #: HALF_OPEN and its holder has not shown itself for the silent-holder timeout
    probe_silent: bool


def _record(row: Any) -> BreakerRecord:
    state = BreakerState(row.breaker_state) if row.breaker_state else BreakerState.CLOSED
    return BreakerRecord(
        state,
        row.breaker_failures,
        row.breaker_changed_at,
        row.breaker_reopens_at,
        row.breaker_probe,
    )


def _breaker_columns(c: Any) -> tuple[Any, ...]:
    return (
        c.breaker_state,
        c.breaker_failures,
        c.breaker_changed_at,
        c.breaker_reopens_at,
        c.breaker_probe,
    )


async def controls_among(
    conn: AsyncConnection, tables: QueueTables, queues: Sequence[str], silent_after: float
) -> dict[str, ControlReading]:
    """The control rows of `queues` that exist, pause and breaker, in one statement;
    the database's clock decides whether a reopening is due and a probe holder
    silent (for `silent_after` seconds)."""
    c = tables.controls
    due = sa.case((c.c.breaker_reopens_at <= utc_now(), 1), else_=0)
    cutoff = utc_now(-sa.bindparam("silent_after", silent_after, type_=sa.Float()))
    silent = sa.case((c.c.breaker_changed_at <= cutoff, 1), else_=0)
    result = await conn.execute(
        sa.select(
            c.c.queue, c.c.paused, *_breaker_columns(c.c), due.label("due"), silent.label("silent")
        ).where(c.c.queue.in_(list(queues)), c.c.channel == WHOLE_QUEUE)
    )
    readings = {}
    for row in result:
        record = _record(row)
        readings[row.queue] = ControlReading(
            paused=bool(row.paused),
            breaker=record,
            reopening_due=record.state is BreakerState.OPEN and bool(row.due),
            probe_silent=record.state is BreakerState.HALF_OPEN and bool(row.silent),
        )
    return readings


def _event(
    tables: QueueTables,
    queue: str,
    before: BreakerState,
    after: BreakerState,
    reason: str,
    channel: str = WHOLE_QUEUE,
) -> sa.Insert:
    # inline: no RETURNING of the new id, which would need SELECT on the history
    return (
        tables.breaker_events.insert()
        .inline()
        .values(
            queue=queue,
            channel=channel,
            from_state=before.value,
            to_state=after.value,
            reason=reason,
            at=utc_now(),
        )
    )


async def change_breaker(
    driver: Driver,
    engine: AsyncEngine,
    queue: str,
    decide: Callable[[BreakerRecord], BreakerChange | None],
    *,
    create: bool = True,
    channel: str = WHOLE_QUEUE,
) -> tuple[BreakerRecord, BreakerRecord] | None:
    """Lock the control row of the queue (or of its `channel`: a channel's own breaker)
    (inserting it first if missing and `create`), let
    `decide` judge the breaker as stored, and write its change with an event row for a
    change of state, all in one transaction. Returns the breaker before and after
    (equal when `decide` changed nothing); None when there is no row and not `create`.

    The lock (SELECT ... FOR UPDATE; SQLite's writer lock) makes the decisions of
    every process about one queue happen one after another."""
    c = driver.tables.controls
    where = (c.c.queue == queue, c.c.channel == channel)
    for _ in range(2):
        async with driver.own_transaction(engine) as conn:
            row = (
                await conn.execute(
                    sa.select(*_breaker_columns(c.c)).where(*where).with_for_update()
                )
            ).first()
            if row is not None:
                before = _record(row)
                change = decide(before)
                if change is None:
                    return before, before
                values: dict[str, Any] = {
                    "breaker_state": change.state.value,
                    "breaker_failures": change.failures,
                    "breaker_probe": change.probe,
                }
                if change.state is not before.state:
                    values["breaker_changed_at"] = utc_now()
                if change.opens:
                    values["breaker_reopens_at"] = utc_now(
                        sa.bindparam("cooldown", change.cooldown, type_=sa.Float())
                    )
                elif change.state is BreakerState.CLOSED:
                    values["breaker_reopens_at"] = None
                await conn.execute(c.update().where(*where).values(**values))
                if change.reason is not None:
                    await conn.execute(
                        _event(
                            driver.tables,
                            queue,
                            before.state,
                            change.state,
                            change.reason,
                            channel,
                        )
                    )
                after = (await conn.execute(sa.select(*_breaker_columns(c.c)).where(*where))).one()
                return before, _record(after)
        if not create:
            return None
        try:
            async with driver.own_transaction(engine) as conn:
                await conn.execute(
                    c.insert().values(queue=queue, channel=channel, updated_at=utc_now())
                )
        except sa.exc.IntegrityError:
            pass  # another process inserted it meanwhile: lock that one
    raise AssertionError(f"the control row of queue {queue!r} ({channel!r}) vanished twice")


def _breaker_active(c: sa.Table) -> sa.ColumnElement[bool]:
    """A breaker that counts failures or is not CLOSED."""
    return sa.or_(
        c.c.breaker_failures > 0,
        c.c.breaker_state.in_([BreakerState.OPEN.value, BreakerState.HALF_OPEN.value]),
    )


async def channels_counting(
    driver: Driver, engine: AsyncEngine, queue: str, channels: Sequence[str]
) -> list[str]:
    """Those of `queue`'s `channels` whose own breaker counts failures or is not
    CLOSED (a row-less or never-tripped channel's breaker is neither)."""
    c = driver.tables.controls
    found: list[str] = []
    async with reading(engine) as conn:
        for start in range(0, len(channels), IDS_PER_STATEMENT):
            result = await conn.execute(
                sa.select(c.c.channel).where(
                    c.c.queue == queue,
                    c.c.channel.in_(list(channels[start : start + IDS_PER_STATEMENT])),
                    _breaker_active(c),
                )
            )
            found += result.scalars()
    return found


async def take_probe(
    driver: Driver, engine: AsyncEngine, queue: str, me: str, *, silent_after: float | None
) -> bool:
    """Compare-and-set to HALF_OPEN with `me` holding the probe: from OPEN once its
    reopening is due, or (with `silent_after`) from a HALF_OPEN whose holder has been
    silent that long. Whether this call won; the winner writes the event."""
    tables = driver.tables
    c = tables.controls
    if silent_after is None:
        before, reason = BreakerState.OPEN, "cooldown over"
        when = c.c.breaker_reopens_at <= utc_now()
    else:
        before, reason = BreakerState.HALF_OPEN, "probe holder silent"
        when = c.c.breaker_changed_at <= utc_now(
            -sa.bindparam("silent_after", silent_after, type_=sa.Float())
        )
    async with driver.own_transaction(engine) as conn:
        won = await conn.execute(
            c.update()
            .where(
                c.c.queue == queue,
                c.c.channel == WHOLE_QUEUE,
                c.c.breaker_state == before.value,
                when,
            )
            .values(
                breaker_state=BreakerState.HALF_OPEN.value,
                breaker_probe=me,
                breaker_changed_at=utc_now(),
            )
        )
        if won.rowcount != 1:
            return False
        await conn.execute(_event(tables, queue, before, BreakerState.HALF_OPEN, reason))
    return True


def _probe_held(c: sa.Table, queue: str, me: str) -> tuple[sa.ColumnElement[bool], ...]:
    """The queue's breaker row while `me` holds its probe."""
    return (
        c.c.queue == queue,
        c.c.channel == WHOLE_QUEUE,
        c.c.breaker_state == BreakerState.HALF_OPEN.value,
        c.c.breaker_probe == me,
    )


async def hand_back_probe(driver: Driver, engine: AsyncEngine, queue: str, me: str) -> bool:
    """A stopping holder gives its probe back: OPEN again and due at once, so another
    process probes now rather than after the silent-holder timeout. Whether it held it."""
    tables = driver.tables
    c = tables.controls
    async with driver.own_transaction(engine) as conn:
        handed = await conn.execute(
            c.update()
            .where(*_probe_held(c, queue, me))
            .values(
                breaker_state=BreakerState.OPEN.value,
                breaker_probe=None,
                breaker_changed_at=utc_now(),
                breaker_reopens_at=utc_now(),
            )
        )
        if handed.rowcount != 1:
            return False
        await conn.execute(
            _event(tables, queue, BreakerState.HALF_OPEN, BreakerState.OPEN, "probe holder stopped")
        )
    return True


async def keep_probe(driver: Driver, engine: AsyncEngine, queue: str, me: str) -> bool:
    """The probe holder shows it is alive (breaker_changed_at); False if it no longer
    holds the probe (reset, or taken over)."""
    c = driver.tables.controls
    async with driver.own_transaction(engine) as conn:
        kept = await conn.execute(
            c.update().where(*_probe_held(c, queue, me)).values(breaker_changed_at=utc_now())
        )
    return kept.rowcount == 1


async def reset_breaker(
    driver: Driver, engine: AsyncEngine, queue: str, channel: str = WHOLE_QUEUE
) -> bool:
    """Close the breaker of the queue (or of its `channel`), failures forgotten
    ("manual reset"); whether it was anything but CLOSED without failures."""

    def closed(current: BreakerRecord) -> BreakerChange | None:
        if current.state is BreakerState.CLOSED and current.failures == 0:
            return None
        return BreakerChange(BreakerState.CLOSED, 0, reason="manual reset")

    changed = await change_breaker(driver, engine, queue, closed, create=False, channel=channel)
    return changed is not None and changed[0] != changed[1]


async def breaker_events(
    conn: AsyncConnection,
    tables: QueueTables,
    queue: str,
    limit: int,
    channel: str = WHOLE_QUEUE,
) -> list[BreakerTransition]:
    """The last `limit` changes of state of the queue's breaker (or its `channel`'s),
    newest first."""
    e = tables.breaker_events
    result = await conn.execute(
        sa.select(e.c.id, e.c.from_state, e.c.to_state, e.c.reason, e.c.at)
        .where(e.c.queue == queue, e.c.channel == channel)
        .order_by(e.c.id.desc())
        .limit(limit)
    )
    return [
        BreakerTransition(row.id, row.from_state, row.to_state, row.reason, to_aware(row.at))
        for row in result
    ]


async def breaker_statuses(
    conn: AsyncConnection, tables: QueueTables, queue: str | None, recent: int
) -> list[BreakerStatus]:
    """Every queue's breaker that ever counted a failure and every channel's that
    counts failures or is not CLOSED (or those of `queue`: its own, CLOSED if it never
    counted one, and its channels'), with their last `recent` changes of state."""
    c = tables.controls
    # a queue's breaker is listed once it ever counted; a channel's (there may be many)
    # while it counts failures or is not CLOSED
    ever_counted = sa.or_(c.c.breaker_state.is_not(None), c.c.breaker_failures > 0)
    channel_active = sa.and_(c.c.channel != WHOLE_QUEUE, _breaker_active(c))
    query = sa.select(c.c.queue, c.c.channel, *_breaker_columns(c.c))
    if queue is None:
        query = query.where(
            sa.or_(sa.and_(c.c.channel == WHOLE_QUEUE, ever_counted), channel_active)
        )
    else:
        query = query.where(c.c.queue == queue, sa.or_(c.c.channel == WHOLE_QUEUE, channel_active))
    found = {
        (row.queue, row.channel): _record(row)
        for row in await conn.execute(query.order_by(c.c.queue, c.c.channel))
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
            recent=await breaker_events(conn, tables, name, recent, channel),
            channel=channel or None,
        )
        for (name, channel), record in found.items()
    ]
