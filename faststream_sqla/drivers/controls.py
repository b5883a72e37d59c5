"""The statements of the controls table (what operators set per queue and channel, and
each breaker's state), of the breakers' history, and of archive retention.

Every database runs the same statements here: the database's clock comes from
clock.utc_now, and SQLite, which has no row locks, ignores FOR UPDATE (its writer lock
orders the writers instead). Workers read the controls through `claim_controls`
(with breakers, `controls_among` too); subscriber.breaker decides what a breaker does
and `change_breaker`, `take_probe`, `keep_probe` and `hand_back_probe` write it; the
admin API reads and changes the rest and turns the rows into its result models.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.clock import utc_now
from faststream_sqla.schema import WHOLE_QUEUE, BreakerState, MessageState, QueueTables

from ._claim import state_literal
from .base import reading
from .ordering import IDS_PER_STATEMENT
from .ranges import channelled_range

if TYPE_CHECKING:
    from .base import Driver

#: channels looked up per statement: one bound parameter each, as ordering's ids
CHANNELS_PER_STATEMENT = IDS_PER_STATEMENT


# -- pausing and limits ------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimControls:
    """What decides how a subscriber claims its queues: which are paused, and which
    the channel claim serves (faststream_sqla.channels)."""

    paused: frozenset[str]
    channelled: frozenset[str]


async def claim_controls(
    conn: AsyncConnection, tables: QueueTables, queues: Sequence[str]
) -> ClaimControls:
    """Which of `queues` are paused, and which the channel claim serves: those with a
    limit or a paused channel in this table, and those with messages of a channel
    waiting. One statement: the queues' control rows, grouped (a queue with many
    channels gives one row), and an index probe per queue for waiting channelled
    messages. Every subscriber reads it every CONTROL_INTERVAL, so idle processes
    cost little."""
    c = tables.controls
    paused = sa.and_(c.c.channel == WHOLE_QUEUE, c.c.paused)
    # a setting, not the claims' own state (rate windows, rotation): with every limit
    # removed the queue goes back to the plain claim
    setting = sa.or_(
        sa.and_(c.c.channel != WHOLE_QUEUE, c.c.paused),
        c.c.max_concurrency.isnot(None),
        c.c.rate_count.isnot(None),
        c.c.channel_max_concurrency.isnot(None),
        c.c.channel_rate_count.isnot(None),
    )
    controls = (
        sa.select(
            c.c.queue,
            sa.func.max(sa.case((paused, 1), else_=0)).label("paused"),
            sa.func.max(sa.case((setting, 1), else_=0)).label("channelled"),
        )
        .where(c.c.queue.in_(list(queues)))
        .group_by(c.c.queue)
    )
    source, waiting = channelled_range(tables)
    # (queue, 0, 1) for each queue with a channelled message waiting
    probes = [
        sa.select(
            sa.literal(queue, sa.String()).label("queue"),
            sa.literal(0, sa.Integer()).label("paused"),
            sa.literal(1, sa.Integer()).label("channelled"),
        ).where(sa.exists().where(source.c.queue == queue, *waiting))
        for queue in queues
    ]
    result = await conn.execute(sa.union_all(controls, *probes))
    paused_found, channelled_found = set(), set()
    for queue, is_paused, is_channelled in result:
        if is_paused:
            paused_found.add(queue)
        if is_channelled:
            channelled_found.add(queue)
    return ClaimControls(frozenset(paused_found), frozenset(channelled_found))


async def channelled_among(
    conn: AsyncConnection, tables: QueueTables, queues: Sequence[str]
) -> set[str]:
    """Which of `queues` the channel claim serves (`claim_controls`)."""
    return set((await claim_controls(conn, tables, queues)).channelled)


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


@dataclass(frozen=True)
class QueueLimitsRow:
    """The queue's own control row: its pause, its limits and its channels' defaults."""

    paused: bool
    max_concurrency: int | None
    rate_count: int | None
    rate_period: float | None
    channel_max_concurrency: int | None
    channel_rate_count: int | None
    channel_rate_period: float | None


@dataclass(frozen=True)
class ChannelLimitsRow:
    """One channel's control row: its pause and its own limits."""

    channel: str
    paused: bool
    max_concurrency: int | None
    rate_count: int | None
    rate_period: float | None


async def queue_limits_row(
    conn: AsyncConnection, tables: QueueTables, queue: str
) -> QueueLimitsRow | None:
    """The queue's own control row; None when it has none."""
    c = tables.controls
    row = (
        await conn.execute(
            sa.select(
                c.c.paused,
                c.c.max_concurrency,
                c.c.rate_count,
                c.c.rate_period,
                c.c.channel_max_concurrency,
                c.c.channel_rate_count,
                c.c.channel_rate_period,
            ).where(c.c.queue == queue, c.c.channel == WHOLE_QUEUE)
        )
    ).first()
    if row is None:
        return None
    return QueueLimitsRow(
        paused=bool(row.paused),
        max_concurrency=row.max_concurrency,
        rate_count=row.rate_count,
        rate_period=row.rate_period,
        channel_max_concurrency=row.channel_max_concurrency,
        channel_rate_count=row.channel_rate_count,
        channel_rate_period=row.channel_rate_period,
    )


async def channel_limits_rows(
    conn: AsyncConnection, tables: QueueTables, queue: str, only: str | None = None
) -> list[ChannelLimitsRow]:
    """The control rows of `queue`'s channels (or of the channel `only`), in no order."""
    c = tables.controls
    query = sa.select(
        c.c.channel, c.c.paused, c.c.max_concurrency, c.c.rate_count, c.c.rate_period
    ).where(c.c.queue == queue, c.c.channel != WHOLE_QUEUE)
    if only is not None:
        query = query.where(c.c.channel == only)
    return [
        ChannelLimitsRow(
            channel=row.channel,
            paused=bool(row.paused),
            max_concurrency=row.max_concurrency,
            rate_count=row.rate_count,
            rate_period=row.rate_period,
        )
        for row in await conn.execute(query)
    ]


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
class BreakerDecision:
    """What `change_breaker` is asked: whose breaker (the queue's own, or its
    `channel`'s), how to `decide` on it, and whether to `create` a missing row."""

    queue: str
    decide: Callable[[BreakerRecord], BreakerChange | None]
    create: bool = True
    channel: str = WHOLE_QUEUE


@dataclass(frozen=True)
class ControlReading:
    """What a worker reads of one queue each turn (ControlWatcher)."""

    paused: bool
    breaker: BreakerRecord
    #: OPEN and its reopening time has come, on the database's clock
    reopening_due: bool
    #: HALF_OPEN and its holder has not shown itself for the silent-holder timeout
    probe_silent: bool


@dataclass(frozen=True)
class BreakerRow:
    """A breaker as `breaker_rows` lists it: whose, and its record."""

    queue: str
    channel: str
    record: BreakerRecord


@dataclass(frozen=True)
class BreakerEvent:
    """One change of state in a breaker's history."""

    id: int
    from_state: str
    to_state: str
    reason: str
    at: datetime


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
    driver: Driver, engine: AsyncEngine, decision: BreakerDecision
) -> tuple[BreakerRecord, BreakerRecord] | None:
    """Lock the control row of the queue (or of its channel: a channel's own breaker)
    (inserting it first if missing and `decision.create`), let `decision.decide` judge
    the breaker as stored, and write its change with an event row for a change of
    state, all in one transaction. Returns the breaker before and after (equal when
    nothing changed); None when there is no row and not `create`.

    The lock (SELECT ... FOR UPDATE; SQLite's writer lock) makes the decisions of
    every process about one queue happen one after another."""
    queue, channel = decision.queue, decision.channel
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
                change = decision.decide(before)
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
        if not decision.create:
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
        for start in range(0, len(channels), CHANNELS_PER_STATEMENT):
            result = await conn.execute(
                sa.select(c.c.channel).where(
                    c.c.queue == queue,
                    c.c.channel.in_(list(channels[start : start + CHANNELS_PER_STATEMENT])),
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


async def breaker_events(
    conn: AsyncConnection,
    tables: QueueTables,
    queue: str,
    limit: int,
    channel: str = WHOLE_QUEUE,
) -> list[BreakerEvent]:
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
        BreakerEvent(row.id, row.from_state, row.to_state, row.reason, row.at) for row in result
    ]


async def breaker_rows(
    conn: AsyncConnection, tables: QueueTables, queue: str | None
) -> list[BreakerRow]:
    """Every queue's breaker that ever counted a failure and every channel's that
    counts failures or is not CLOSED (or those of `queue`: its own, if it has a row,
    and its channels'), by queue and channel."""
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
    return [
        BreakerRow(row.queue, row.channel, _record(row))
        for row in await conn.execute(query.order_by(c.c.queue, c.c.channel))
    ]


# -- archive retention -------------------------------------------------------------------


@dataclass(frozen=True)
class OldArchive:
    """The archive rows of one queue and state archived more than `older_than_seconds`
    ago, on the database's clock."""

    queue: str
    state: MessageState
    older_than_seconds: float


@dataclass(frozen=True)
class PrunedBatch:
    """What one batch of `prune_old_archive` found and deleted (fewer when another
    process deleted some meanwhile)."""

    found: int
    deleted: int


def _old(a: sa.Table, old: OldArchive) -> tuple[sa.ColumnElement[bool], ...]:
    return (
        a.c.queue == old.queue,
        a.c.state == state_literal(old.state),
        a.c.archived_at < utc_now(-old.older_than_seconds),
    )


async def count_old_archive(
    conn: AsyncConnection, tables: QueueTables, ranges: Sequence[OldArchive]
) -> int:
    """How many archive rows `ranges` hold together (a count reads every one)."""
    a = tables.archive
    total = 0
    for old in ranges:
        total += (
            await conn.scalar(sa.select(sa.func.count()).select_from(a).where(*_old(a, old))) or 0
        )
    return total


async def prune_old_archive(
    driver: Driver, engine: AsyncEngine, old: OldArchive, batch_size: int
) -> PrunedBatch:
    """Delete the oldest `batch_size` rows of `old`, one index range, in one
    transaction."""
    a = driver.tables.archive
    async with driver.own_transaction(engine) as conn:
        ids = list(
            (
                await conn.execute(
                    sa.select(a.c.id)
                    .where(*_old(a, old))
                    .order_by(a.c.archived_at)
                    .limit(batch_size)
                )
            ).scalars()
        )
        if not ids:
            return PrunedBatch(0, 0)
        result = await conn.execute(a.delete().where(a.c.id.in_(ids)))
    return PrunedBatch(len(ids), result.rowcount or 0)
