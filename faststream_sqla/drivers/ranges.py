"""Which index ranges hold which of a queue's messages, for each table shape: PostgreSQL
and SQLite keep them in partial indexes (the claim index, the stuck index, the
ordering-key index), MySQL and MariaDB in one index over the generated `ready_at`
with the keyed messages' keys in a table of their own (`QueueTables.keys`). Reads that
count or walk messages (the admin API, backpressure) take their terms from here, so
that the knowledge of those shapes stays in the database layer."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from faststream_sqla.clock import to_naive_utc, utc_now
from faststream_sqla.schema import CHANNEL_READY, NOT_READY, PRIORITIES, MessageState, QueueTables

from ._claim import ready_predicate, state_literal

#: the states a purge deletes: every message waiting to be handled
PURGED = (MessageState.PENDING, MessageState.RETRYABLE, MessageState.WAITING)


def _ready_at_shape(m: sa.Table) -> bool:
    """MySQL's and MariaDB's tables, with the generated `ready_at`."""
    return "ready_at" in m.c


def live_ranges(
    m: sa.Table, *, apart: bool = True
) -> dict[str, tuple[sa.ColumnElement[bool], ...]]:
    """Predicates whose indexes, between them, hold every live message with the queue
    first: claimable (the claim index), in flight (the stuck index) and waiting behind
    an ordering key (the ordering-key index: WAITING messages all have a key). MySQL's
    one ready index holds all three: one range, "all". `apart`: no message in two
    ranges (for counting); without it the waiting range is the ordering-key index's
    own predicate, which a probe for any live row reads without visiting the table."""
    if "ready_at" in m.c:
        return {"all": ()}
    keyed = m.c.ordering_key.isnot(None)
    return {
        "ready": (ready_predicate(m), m.c.channel.is_(None)),
        "channelled": (ready_predicate(m), m.c.channel.isnot(None)),
        "processing": (m.c.state == state_literal(MessageState.PROCESSING),),
        "waiting": (keyed, m.c.state == state_literal(MessageState.WAITING)) if apart else (keyed,),
    }


def purge_ranges(m: sa.Table) -> list[tuple[sa.ColumnElement[bool], ...]]:
    """The waiting messages (PURGED) as index ranges: on PostgreSQL and SQLite the claim
    index (PENDING, RETRYABLE) and the ordering-key index (WAITING), whose partial
    predicates a single `state IN (...)` would not match; on MySQL the ready index
    holds all."""
    if _ready_at_shape(m):
        return [(m.c.state.in_([state_literal(s) for s in PURGED]),)]
    return [
        *_claimable_apart(m),
        (m.c.ordering_key.isnot(None), m.c.state == state_literal(MessageState.WAITING)),
    ]


def _claimable_apart(m: sa.Table) -> list[tuple[sa.ColumnElement[bool], ...]]:
    """PostgreSQL and SQLite: the claimable messages as the two partial indexes hold
    them, the plain ones (the claim index) and the channelled ones (the channel index).
    A bare `ready_predicate` matches neither index's predicate, and the planner then
    reads the whole table."""
    return [
        (ready_predicate(m), m.c.channel.is_(None)),
        (ready_predicate(m), m.c.channel.isnot(None)),
    ]


def archived_between(
    a: sa.Table, since: datetime | None, until: datetime | None
) -> list[sa.ColumnElement[bool]]:
    """The archive rows archived in [since, until) (aware datetimes; None: no bound),
    the last column of the archive index after queue and state."""
    where = []
    if since is not None:
        where.append(a.c.archived_at >= to_naive_utc(since))
    if until is not None:
        where.append(a.c.archived_at < to_naive_utc(until))
    return where


@dataclass(frozen=True)
class QueueRanges:
    """One queue's messages by kind, each as the terms of the index range that holds
    them; the claimable ones are one range or two (plain and channelled, no message in
    both), which `due` orders."""

    due: sa.ColumnElement[Any]
    claimable: tuple[tuple[sa.ColumnElement[bool], ...], ...]
    processing: tuple[sa.ColumnElement[bool], ...]
    waiting: tuple[sa.ColumnElement[bool], ...]


def queue_ranges(m: sa.Table, queue: str) -> QueueRanges:
    """`queue`'s claimable, in-flight and waiting messages. The priorities as an IN
    list: each kind is a few ranges of the claim index (priority comes second in it),
    not a walk of the queue's whole prefix."""
    in_queue = m.c.queue == queue
    levels = m.c.priority.in_([sa.literal_column(str(p)) for p in PRIORITIES])
    if _ready_at_shape(m):
        in_flight = (in_queue, levels, m.c.ready_at == NOT_READY)
        return QueueRanges(
            due=m.c.ready_at,
            claimable=((in_queue, levels, m.c.ready_at < NOT_READY),),
            processing=(*in_flight, m.c.state == state_literal(MessageState.PROCESSING)),
            waiting=(*in_flight, m.c.state == state_literal(MessageState.WAITING)),
        )
    return QueueRanges(
        due=m.c.next_attempt_at,
        # the priorities lead the claim index only; the channel index has the channel
        claimable=tuple(
            (in_queue, levels, *where) if index == 0 else (in_queue, *where)
            for index, where in enumerate(_claimable_apart(m))
        ),
        processing=(in_queue, m.c.state == state_literal(MessageState.PROCESSING)),
        waiting=(
            in_queue,
            m.c.ordering_key.isnot(None),
            m.c.state == state_literal(MessageState.WAITING),
        ),
    )


def claim_index_order(
    m: sa.Table,
) -> tuple[sa.ColumnElement[Any], list[sa.ColumnElement[bool]]]:
    """The claim index's due column, and the terms that select its claimable entries
    within one queue and priority (on PostgreSQL and SQLite the plain messages only:
    `channelled_due_range` has the others)."""
    if _ready_at_shape(m):
        return m.c.ready_at, []
    return m.c.next_attempt_at, list(_claimable_apart(m)[0])


def channelled_due_range(m: sa.Table) -> tuple[sa.ColumnElement[bool], ...] | None:
    """PostgreSQL and SQLite: the terms of the claimable channelled messages, which the
    channel index holds ordered by channel first (None on MySQL, whose ready index
    holds them with the rest)."""
    if _ready_at_shape(m):
        return None
    return _claimable_apart(m)[1]


def channelled_range(tables: QueueTables) -> tuple[sa.Table, tuple[sa.ColumnElement[bool], ...]]:
    """Where a queue's channelled messages are, as (table, terms): MySQL's keys table
    holds every one of them; elsewhere the claim index's channelled range holds the
    claimable ones."""
    if tables.keys is not None:
        return tables.keys, (tables.keys.c.channel.isnot(None),)
    return tables.message, live_ranges(tables.message)["channelled"]


#: per channel: (ready now, in flight, later: delayed, backing off or waiting behind
#: its ordering key)
ChannelCounts = dict[str, list[int]]


def _add(
    counts: ChannelCounts, channel: str, ready: Any = 0, in_flight: Any = 0, later: Any = 0
) -> None:
    found = counts.setdefault(channel, [0, 0, 0])
    found[0] += int(ready)
    found[1] += int(in_flight)
    found[2] += int(later)


async def channel_counts(
    conn: AsyncConnection, tables: QueueTables, queue: str, only: str | None
) -> ChannelCounts:
    """The queue's live channelled messages by channel (`only`: one channel). A GROUP BY
    over them (an operator's read, not the claim's): on MySQL one pass over the keys
    table's channel index, which holds every one of them; elsewhere one per partial
    index that holds a kind of them (ready, in flight, waiting behind an ordering
    key)."""
    m = tables.message
    counts: ChannelCounts = {}
    if tables.keys is not None:
        k = tables.keys
        where: list[sa.ColumnElement[bool]] = [k.c.queue == queue, k.c.channel.isnot(None)]
        if only is not None:
            where.append(k.c.channel == only)
        ready = sa.and_(
            m.c.ready_at == sa.literal(CHANNEL_READY, m.c.ready_at.type),
            m.c.next_attempt_at <= utc_now(),
        )
        processing = m.c.state == state_literal(MessageState.PROCESSING)
        result = await conn.execute(
            sa.select(
                k.c.channel,
                sa.func.count(),
                sa.func.sum(sa.case((ready, 1), else_=0)),
                sa.func.sum(sa.case((processing, 1), else_=0)),
            )
            .select_from(k.join(m, m.c.id == k.c.id))
            .where(*where)
            .group_by(k.c.channel)
        )
        for channel, total, ready_n, in_flight_n in result:
            _add(counts, channel, ready_n, in_flight_n, total - ready_n - in_flight_n)
        return counts
    this = [m.c.queue == queue, m.c.channel.isnot(None)]
    if only is not None:
        this.append(m.c.channel == only)
    due = sa.func.sum(sa.case((m.c.next_attempt_at <= utc_now(), 1), else_=0))
    # the terms of each partial index, as the index states them, so the planner uses it
    ready_range = await conn.execute(
        sa.select(m.c.channel, sa.func.count(), due)
        .where(*this, ready_predicate(m))
        .group_by(m.c.channel)
    )
    for channel, total, due_n in ready_range:
        _add(counts, channel, ready=due_n, later=total - due_n)
    in_flight_range = await conn.execute(
        sa.select(m.c.channel, sa.func.count())
        .where(*this, m.c.state == state_literal(MessageState.PROCESSING))
        .group_by(m.c.channel)
    )
    for channel, n in in_flight_range:
        _add(counts, channel, in_flight=n)
    waiting_range = await conn.execute(
        sa.select(m.c.channel, sa.func.count())
        .where(
            *this, m.c.ordering_key.isnot(None), m.c.state == state_literal(MessageState.WAITING)
        )
        .group_by(m.c.channel)
    )
    for channel, n in waiting_range:
        _add(counts, channel, later=n)
    return counts


def active_count(m: sa.Table) -> sa.Select:
    """How many of one queue's messages wait or are in flight, counted no further than
    :at_most: a bounded probe of the claim, stuck and ordering-key indexes, whose cost
    does not grow with the queue. MySQL's one ready index holds every kind, so one probe
    does."""

    def probe(*where: sa.ColumnElement[bool]) -> sa.ScalarSelect:
        found = (
            sa.select(sa.literal_column("1").label("one"))
            .where(m.c.queue == sa.bindparam("probe_queue"), *where)
            .limit(sa.bindparam("at_most", type_=sa.Integer()))
            .subquery()
        )
        return sa.select(sa.func.count()).select_from(found).scalar_subquery()

    probes = [probe(*where) for where in live_ranges(m).values()]
    total: sa.ColumnElement[Any] = probes[0]
    for more in probes[1:]:
        total = total + more
    return sa.select(total)
