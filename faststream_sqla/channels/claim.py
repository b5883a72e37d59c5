"""The channel claim: up to `limit` messages of one queue, within every limit, with
the queue's channels taking turns.

A claim is one read and one write, ordered by the queue row's `version`:

1. **Read** (one statement, no lock): the queue's control row (its limits, rate
   window, rotation and version), how many of its messages are in flight, whether
   messages without a channel are due, the database's time, and the next channels
   with ready messages after the rotation (the channel served last), one index
   descent each (a recursive query), with each one's control row and in-flight count.
2. **Plan** (Python, `plan`): share the claim among them in turns, one message each
   per turn, while a channel's room lasts (max_concurrency minus in flight, and its
   rate window's allowance) and the queue's own room lasts. Messages without a channel
   take one turn per round, where the round wraps.
3. **Write** (PostgreSQL: one statement; elsewhere one transaction): count the
   queue row's version up *only if it is still the one read*, set the rotation and
   the rate windows, and mark each channel's oldest due messages PROCESSING, as many
   as its share. If another claim (or a change of limits) moved the version since the
   read, nothing is written and the claim reads again: every claim's counts were
   exact when it wrote. Messages settling meanwhile only make room, never less.

In flight counts PROCESSING rows, so nothing is kept in step with outcomes: a
settled, released or deferred message simply stops counting.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Hashable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa

from faststream_sqla.clock import utc_now
from faststream_sqla.dialects._claim import (
    claimed_columns,
    first_of_its_key,
    priority_literal,
    ready_ids,
    ready_predicate,
    state_literal,
)
from faststream_sqla.schema import (
    CHANNEL_READY,
    CLAIMED_COLUMNS,
    MAX_KEY_LENGTH,
    NOT_READY,
    PRIORITIES,
    WHOLE_QUEUE,
    BreakerState,
    MessageState,
    QueueTables,
)

from .groups import group_key
from .plan import (
    EXTRA_CANDIDATES,
    PLAIN,
    SCAN_PER_CANDIDATE,
    Candidate,
    Member,
    Plan,
    QueueRow,
    plan,
    rate_of,
    wraps,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Dialect as SqlDialect
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from faststream_sqla.dialects import Dialect
    from faststream_sqla.dialects._compiled import DriverStatement, DriverStatements

    from .read_ahead import ReadAhead

#: MariaDB: rows a streamed read may examine per keys-index entry its bounded walk
#: would read, and per message in flight, before the server cuts it short
#: (ChannelClaim.read_with)
EXAMINED_PER_SCANNED = 10
EXAMINED_PER_IN_FLIGHT = 10
#: MariaDB: reads of a queue made with the bounded walk after a streamed read was cut
#: short (a channel with a long backlog in its range), doubled for each cut in a row
#: up to BOUNDED_AFTER_CUTS times as many
BOUNDED_AFTER_CUT = 64
BOUNDED_AFTER_CUTS = 64
#: the part of a streamed read's last row: a read without it was cut short
_COMPLETE = 4
#: reads a claim makes when other claims keep moving the queue's version meanwhile
CONFLICT_RETRIES = 4
#: a take's statement: channels with a branch of their own, whether PLAIN has one, and
#: whether a join takes the channels the read saw whole (ChannelClaim.take_shape)
TakeShape = tuple[int, bool, bool]


class ProbeMissed(Exception):
    """A channel's breaker changed between the claim's read and its write: the claim
    is rolled back and read again."""


def _as_time(value: Any) -> datetime:
    """A time the read returned: SQLite's come as text."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def _time_or_none(value: Any) -> datetime | None:
    return None if value is None else _as_time(value)


def candidate(row: Any) -> Candidate:
    """A channel row of the read (its parts 1 and 2) as the plan takes it. The read
    shares its columns among its parts: for a channel, `plain_waiting` says whether it
    has due messages and `in_flight` how many keys-index entries MySQL's walk read."""
    return Candidate(
        channel=row["channel"],
        after_rotation=row["part"] == 1,
        stored=bool(row["stored"]),
        paused=bool(row["paused"]),
        due=row["plain_waiting"],
        max_concurrency=row["max_concurrency"],
        rate=rate_of(row["rate_count"], row["rate_period"]),
        rate_slot=row["rate_slot"],
        rate_counts=row["rate_counts"],
        group_stored=bool(row["group_stored"]),
        group_paused=bool(row["group_paused"]),
        group_max_concurrency=row["group_max_concurrency"],
        group_rate=rate_of(row["group_rate_count"], row["group_rate_period"]),
        group_rate_slot=row["group_rate_slot"],
        group_rate_counts=row["group_rate_counts"],
        breaker=row["breaker"],
        reopened=bool(row["reopened"]),
        breaker_since=_time_or_none(row["breaker_since"]),
        breaker_until=_time_or_none(row["breaker_until"]),
        keys_read=row["in_flight"] or 0,
    )


def _queue_row(row: Any) -> QueueRow:
    now = _as_time(row["now"])
    return QueueRow(
        paused=bool(row["paused"]),
        max_concurrency=row["max_concurrency"],
        rate=rate_of(row["rate_count"], row["rate_period"]),
        rate_slot=row["rate_slot"],
        rate_counts=row["rate_counts"],
        channel_max_concurrency=row["channel_max_concurrency"],
        channel_rate=rate_of(row["channel_rate_count"], row["channel_rate_period"]),
        rotation=row["rotation"],
        version=int(row["version"]),
        plain_waiting=bool(row["plain_waiting"]),
        now=now,
    )


def _bind(name: str, type_: Any = None) -> sa.BindParameter[Any]:
    return sa.bindparam(name, type_=type_)


class ChannelClaim:
    """The statements of the channel claim for one set of tables, built once (the
    write, once per shape: how many channels get a share)."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        tables: QueueTables = dialect.tables
        self.tables = tables
        self.mysql = tables.keys is not None
        self.read = self._build_read()
        # The read's part 2 (the channels from the start) is needed only when a claim
        # reaches the end of the channels: with many channels, one claim in many. Each
        # queue's read leaves it out while the claim before did not need it, and the
        # claim reads it alone when it turns out to be needed after all (`read_with`).
        self.read_after_rotation = self._build_read(wrapped=False)
        self.read_from_start = self._build_read(wrapped=True, alone=True)
        #: MariaDB's reads with streamed walks (`_mysql_walk`), by `wrapped`
        self.streamed_reads = (
            {wrapped: self._build_read(wrapped=wrapped, streamed=True) for wrapped in (True, False)}
            if self.mysql
            else {}
        )
        #: per queue: whether its last claim here went on to the channels from the start
        self._claims_wrap: dict[str, bool] = {}
        #: MariaDB, per queue: reads left to make bounded since a streamed one was cut,
        #: and how many were cut in a row
        self._bounded_reads: dict[str, int] = {}
        self._cuts: dict[str, int] = {}
        #: per queue: the messages in flight its last read counted (a streamed read's
        #: allowance of rows to examine grows with them)
        self._in_flight_seen: dict[str, int] = {}
        self._by_shape: dict[TakeShape, Any] = {}
        self.bump = self._build_bump()

    # -- the read -----------------------------------------------------------------------
    def _in_flight(self) -> list[sa.ColumnElement[bool]]:
        """The queue's PROCESSING rows, through the index that holds them."""
        m = self.tables.message
        terms: list[sa.ColumnElement[bool]] = [m.c.queue == _bind("ch_queue")]
        if self.mysql:
            terms += [
                m.c.priority.in_([sa.literal_column(str(p)) for p in PRIORITIES]),
                m.c.ready_at == sa.literal(NOT_READY, m.c.ready_at.type),
            ]
        terms.append(m.c.state == state_literal(MessageState.PROCESSING))
        return terms

    def _plain_waiting(self) -> sa.ColumnElement[bool]:
        """Whether messages without a channel are due: the claim index's first due
        entry."""
        m = self.tables.message
        if self.mysql:
            due: list[sa.ColumnElement[bool]] = [
                m.c.priority.in_([sa.literal_column(str(p)) for p in PRIORITIES]),
                m.c.ready_at <= utc_now(),
            ]
        else:
            due = [ready_predicate(m), m.c.channel.is_(None), m.c.next_attempt_at <= utc_now()]
        return sa.exists().where(m.c.queue == _bind("ch_queue"), *due)

    def _channel_due(self, channel: sa.ColumnElement[str]) -> sa.ColumnElement[Any]:
        """Whether `channel` has a message due now: a channel whose messages are all
        delayed (or, on MySQL, all in flight) gets no share of the claim. On MySQL, the
        id of the first one the take would take (NULL: none), which spares the take for
        a channel whose share is one message (`known_ids`)."""
        tables, m = self.tables, self.tables.message
        due = m.c.next_attempt_at <= utc_now()
        # A scalar "SELECT 1 ... LIMIT 1" (1 or NULL), not EXISTS: PostgreSQL may run an
        # EXISTS as a hash of every channel's due messages, built each claim.
        found: sa.Select[Any]
        if tables.keys is not None:
            k = tables.keys
            # stops at the first due one; a channel whose entries are all delayed or in
            # flight is read whole
            return (
                sa.select(k.c.id)
                .select_from(k.join(m, m.c.id == k.c.id))
                .where(
                    k.c.queue == _bind("ch_queue"),
                    k.c.channel == channel,
                    m.c.ready_at == sa.literal(CHANNEL_READY, m.c.ready_at.type),
                    due,
                    first_of_its_key(tables),
                )
                .order_by(k.c.id)
                .limit(1)
                .scalar_subquery()
            )
        else:
            found = sa.select(sa.literal_column("1")).where(
                m.c.queue == _bind("ch_queue"),
                m.c.channel == channel,
                ready_predicate(m),
                m.c.channel.isnot(None),
                due,
            )
        return found.limit(1).scalar_subquery().isnot(None)

    def _walk(
        self,
        name: str,
        start: sa.ColumnElement[str],
        stop: sa.ColumnElement[str] | None,
        *,
        streamed: bool = False,
    ) -> Any:
        """The channels after `start` (and up to `stop`) with live (PostgreSQL, SQLite:
        ready) messages, in order, at most :most, as (channel, n, entries): one index
        descent each. MySQL's keys table holds every channelled message; elsewhere the
        channel index holds the ready ones. `stop` is compared by the database, in its
        collation, as it orders the channels."""
        tables = self.tables
        if tables.keys is not None:
            return self._mysql_walk(name, start, stop, streamed=streamed)
        source = tables.message

        def ready(alias: Any) -> list[sa.ColumnElement[bool]]:
            terms = [ready_predicate(alias), alias.c.channel.isnot(None)]
            if stop is not None:
                terms.append(alias.c.channel <= stop)
            return terms

        # ORDER BY ... LIMIT 1 rather than min(): PostgreSQL's generic plan made the
        # min() of the first step, whose bound is a subquery, an aggregate over the
        # queue's whole range
        first_table = source.alias(f"{name}_first")
        first = (
            sa.select(first_table.c.channel)
            .where(
                first_table.c.queue == _bind("ch_queue"),
                first_table.c.channel > start,
                *ready(first_table),
            )
            .order_by(first_table.c.channel)
            .limit(1)
            .scalar_subquery()
        )
        walk = sa.select(
            first.label("channel"),
            sa.literal_column("1").label("n"),
            sa.null().label("entries"),
        ).cte(name, recursive=True)
        next_table = source.alias(f"{name}_next")
        following = (
            sa.select(next_table.c.channel)
            .where(
                next_table.c.queue == _bind("ch_queue"),
                next_table.c.channel > walk.c.channel,
                *ready(next_table),
            )
            .order_by(next_table.c.channel)
            .limit(1)
            .scalar_subquery()
        )
        return walk.union_all(
            sa.select(following, walk.c.n + 1, sa.null()).where(
                walk.c.channel.isnot(None), walk.c.n < _bind("most", sa.Integer())
            )
        )

    def _mysql_walk(
        self,
        name: str,
        start: sa.ColumnElement[str],
        stop: sa.ColumnElement[str] | None,
        *,
        streamed: bool = False,
    ) -> Any:
        """MariaDB evaluates the recursive walk's step as a walk of the queue's whole
        key range (no range access on a correlated bound), so there the channels come
        from one range of the keys index after `start`, read no further than :scan
        entries; `entries` counts what was read of each, so the plan can tell a range
        cut short (the rotation then stops at its end) from the end of the queue.

        `streamed`: the range grouped as the index yields it, up to :most channels, with
        no bound on the entries read. It saves the bounded walk's two temporary tables
        (the range copied, then grouped), but reads every entry of a channel with a long
        backlog: the whole read is made with the server's own bound on the rows it
        examines (ChannelClaim.read_with)."""
        k = self.tables.keys
        assert k is not None
        bounds = [k.c.queue == _bind("ch_queue"), k.c.channel > start]
        if stop is not None:
            bounds.append(k.c.channel <= stop)
        hint = f"FORCE INDEX (ix_{self.tables.message.name}_channel)"
        channel: sa.ColumnElement[str]
        if streamed:
            channel = k.c.channel
            ranged = sa.select(channel).with_hint(k, hint).where(*bounds)
        else:
            head = (
                sa.select(k.c.channel)
                .with_hint(k, hint)
                .where(*bounds)
                .order_by(k.c.channel)
                .limit(_bind("scan", sa.Integer()))
                .subquery(f"{name}_head")
            )
            channel = head.c.channel
            ranged = sa.select(channel)
        distinct = (
            ranged.add_columns(sa.func.count().label("entries"))
            .group_by(channel)
            .order_by(channel)
            .limit(_bind("most", sa.Integer()))
            .subquery(f"{name}_channels")
        )
        # numbered in order, as the recursive walk numbers them
        return sa.select(
            distinct.c.channel,
            sa.func.row_number().over(order_by=distinct.c.channel).label("n"),
            distinct.c.entries,
        ).subquery(name)

    def _build_read(
        self, *, wrapped: bool = True, alone: bool = False, streamed: bool = False
    ) -> Any:
        """Part 0: the queue's row; parts 1 and 2: the channels after the rotation and
        from the start, each with its control row; part 3: the messages in flight, per
        channel (`n`; the channel NULL for those without one). The in-flight counts
        come as rows of their own, not joined: MariaDB computed a shared CTE once per
        use. Without `wrapped`, no part 2; `alone`, part 2 only.

        `streamed` (MariaDB): the walks stream (`_mysql_walk`), and the read ends with
        part 4, one constant row, and `LIMIT ROWS EXAMINED :examined`: the server stops
        a read that examines more and returns what it has so far, which then lacks
        part 4. A `DO 0` after it keeps the driver from asking for the warning that the
        cut leaves, and from logging it."""
        c, m = self.tables.controls, self.tables.message
        queue_row = c.alias("queue_row")
        is_queue_row = (queue_row.c.queue == _bind("ch_queue"), queue_row.c.channel == WHOLE_QUEUE)
        rotation = (
            sa.select(c.c.rotation)
            .where(c.c.queue == _bind("ch_queue"), c.c.channel == WHOLE_QUEUE)
            .scalar_subquery()
        )
        head = sa.select(
            sa.literal_column("0").label("part"),
            sa.literal_column("0").label("n"),
            sa.cast(sa.null(), m.c.channel.type).label("channel"),
            sa.true().label("stored"),
            queue_row.c.paused,
            queue_row.c.max_concurrency,
            queue_row.c.rate_count,
            queue_row.c.rate_period,
            queue_row.c.rate_slot,
            queue_row.c.rate_counts,
            queue_row.c.channel_max_concurrency,
            queue_row.c.channel_rate_count,
            queue_row.c.channel_rate_period,
            queue_row.c.rotation,
            queue_row.c.version,
            sa.null().label("in_flight"),
            self._plain_waiting().label("plain_waiting"),
            utc_now().label("now"),
            # a channel's own circuit breaker: its state, whether it may let a probe
            # through, and its cooldown's bounds
            sa.cast(sa.null(), c.c.breaker_state.type).label("breaker"),
            sa.null().label("reopened"),
            sa.cast(sa.null(), c.c.breaker_changed_at.type).label("breaker_since"),
            sa.cast(sa.null(), c.c.breaker_reopens_at.type).label("breaker_until"),
            # the control row of a channel's group (groups.py)
            sa.null().label("group_stored"),
            sa.null().label("group_paused"),
            sa.null().label("group_max_concurrency"),
            sa.null().label("group_rate_count"),
            sa.null().label("group_rate_period"),
            sa.null().label("group_rate_slot"),
            sa.cast(sa.null(), c.c.rate_counts.type).label("group_rate_counts"),
        ).where(*is_queue_row)

        def channels(part: int, walk: Any) -> sa.Select:
            row = c.alias(f"channel_row_{part}")
            group = c.alias(f"group_row_{part}")
            return (
                sa.select(
                    sa.literal_column(str(part)),
                    walk.c.n,
                    walk.c.channel,
                    row.c.queue.isnot(None),
                    row.c.paused,
                    row.c.max_concurrency,
                    row.c.rate_count,
                    row.c.rate_period,
                    row.c.rate_slot,
                    row.c.rate_counts,
                    sa.null(),
                    sa.null(),
                    sa.null(),
                    sa.null(),
                    sa.null(),
                    walk.c.entries,
                    self._channel_due(walk.c.channel),
                    sa.null(),
                    row.c.breaker_state,
                    sa.case((row.c.breaker_reopens_at <= utc_now(), 1), else_=0),
                    row.c.breaker_changed_at,
                    row.c.breaker_reopens_at,
                    group.c.queue.isnot(None),
                    group.c.paused,
                    group.c.max_concurrency,
                    group.c.rate_count,
                    group.c.rate_period,
                    group.c.rate_slot,
                    group.c.rate_counts,
                )
                .select_from(
                    walk.outerjoin(
                        row,
                        sa.and_(row.c.queue == _bind("ch_queue"), row.c.channel == walk.c.channel),
                    ).outerjoin(
                        group,
                        sa.and_(
                            group.c.queue == _bind("ch_queue"),
                            # '' for a channel in no group: the queue's row, not a group
                            group.c.channel == group_key(walk.c.channel),
                            group.c.channel != WHOLE_QUEUE,
                        ),
                    )
                )
                .where(walk.c.channel.isnot(None))
            )

        after = self._walk(
            "after_rotation", sa.func.coalesce(rotation, WHOLE_QUEUE), None, streamed=streamed
        )
        from_start = self._walk(
            "from_start",
            sa.literal(WHOLE_QUEUE, m.c.channel.type),
            sa.func.coalesce(rotation, WHOLE_QUEUE),
            streamed=streamed,
        )
        nothing = [sa.null()] * 26
        busy = (
            sa.select(sa.literal_column("3"), sa.func.count(), m.c.channel, *nothing)
            .where(*self._in_flight())
            .group_by(m.c.channel)
        )
        if self.mysql:
            # While a drain's settled messages wait for InnoDB's purge, their entries
            # still fill the in-flight range and swell its estimate: left to itself
            # MariaDB then counted by scanning the queue's entries or the whole table.
            busy = busy.with_hint(m, f"FORCE INDEX (ix_{m.name}_ready)")
        if alone:  # named as the whole read's columns, which its first part names
            names = [column.name for column in head.selected_columns]
            part = channels(2, from_start)
            return part.with_only_columns(
                *(
                    column.label(name)
                    for column, name in zip(part.selected_columns, names, strict=True)
                )
            )
        parts = [head, channels(1, after), *([channels(2, from_start)] if wrapped else []), busy]
        if streamed:
            parts.append(
                sa.select(sa.literal_column(str(_COMPLETE)), *[sa.null()] * 28).suffix_with(
                    sa.text("LIMIT ROWS EXAMINED :examined; DO 0")
                )
            )
        return sa.union_all(*parts)

    # -- the write ----------------------------------------------------------------------
    def _build_bump(self) -> sa.Update:
        """The queue row's version counted up, with the rotation and its rate window,
        if the version is still the one read."""
        c = self.tables.controls
        return (
            sa.update(c)
            .where(
                c.c.queue == _bind("ch_queue"),
                c.c.channel == WHOLE_QUEUE,
                c.c.version == _bind("seen_version", sa.BigInteger()),
            )
            .values(
                version=c.c.version + 1,
                rotation=_bind("new_rotation", c.c.rotation.type),
                rate_slot=_bind("queue_slot", sa.BigInteger()),
                rate_counts=_bind("queue_counts", c.c.rate_counts.type),
            )
        )

    def _branch(self, i: int | None) -> sa.Select:
        """One member's oldest due messages' ids, up to :take_<i> (PLAIN for i None)."""
        tables, m = self.tables, self.tables.message
        picked = [m.c.id]
        now = _bind("now", m.c.next_attempt_at.type)
        name = "plain" if i is None else str(i)
        limit = _bind(f"take_{name}", sa.Integer())
        if i is None:
            # as the plain claim takes them: highest priority first, one range of the
            # claim index per priority (_claim.ready_ids), so no claim sorts the backlog
            due = m.c.ready_at if self.mysql else m.c.next_attempt_at
            levels = [
                ready_ids(tables, priority_literal(level), m.c.priority, due).subquery(
                    f"level_{level}"
                )
                for level in PRIORITIES
            ]
            ranges = sa.union_all(*(level.select() for level in levels)).subquery("levels")
            due_column = ranges.c[due.name]
            return (
                sa.select(ranges.c.id)
                .order_by(ranges.c.priority.desc(), due_column, ranges.c.id)
                .limit(limit)
            )
        channel = _bind(f"member_{name}", m.c.channel.type)
        if tables.keys is not None:
            k = tables.keys
            # the keys index walks the channel's live messages in id order; in-flight
            # and not yet due ones are passed over
            return (
                sa.select(*picked)
                .select_from(k.join(m, m.c.id == k.c.id))
                .where(
                    k.c.queue == _bind("ch_queue"),
                    k.c.channel == channel,
                    m.c.ready_at == sa.literal(CHANNEL_READY, m.c.ready_at.type),
                    m.c.next_attempt_at <= now,
                    first_of_its_key(tables),
                )
                .order_by(k.c.id)
                .limit(limit)
                .prefix_with("STRAIGHT_JOIN")
                # left to itself MariaDB walked the keys table by id for the ORDER BY
                .with_hint(k, f"FORCE INDEX (ix_{m.name}_channel)")
            )
        return (
            sa.select(*picked)
            .where(
                m.c.queue == _bind("ch_queue"),
                m.c.channel == channel,
                ready_predicate(m),
                m.c.channel.isnot(None),
                m.c.next_attempt_at <= now,
                first_of_its_key(tables),
            )
            .order_by(m.c.next_attempt_at, m.c.id)
            .limit(limit)
        )

    def _take(self, shape: TakeShape) -> sa.Select:
        """The branches of `shape`'s channels and PLAIN's, and its join of whole
        channels, as one UNION ALL."""
        channels, plain, joined = shape
        wanted: list[int | None] = [*range(channels), *([None] if plain else [])]
        if self.mysql:
            # (SELECT ... LIMIT n) UNION ALL (...): no derived table per branch
            branches = [self._branch(i) for i in wanted]
            if joined:
                branches.append(self._whole_channels().subquery("whole").select())
        else:  # SQLite takes a compound's LIMIT only outside it
            branches = [
                self._branch(i).subquery(f"b{'p' if i is None else i}").select() for i in wanted
            ]
        if len(branches) == 1:
            return branches[0]
        return sa.union_all(*branches)  # type: ignore[return-value]

    def _whole_channels(self) -> sa.Select:
        """MySQL: the oldest due messages' ids of the channels the read saw whole, each
        up to its share, in one statement whose text does not depend on how many
        (:ch_shares, a JSON array of [channel, share]): MariaDB has no LATERAL, so
        the channels' messages are numbered by a window over all of their live
        entries, which the read bounded. A branch per channel cost the server a
        parse and a plan each."""
        tables, m = self.tables, self.tables.message
        k = tables.keys
        assert k is not None
        collation = getattr(self.dialect, "key_collation", "utf8mb4_bin")
        shares = (
            sa.func.json_table(
                _bind("ch_shares"),
                sa.literal_column(
                    f"'$[*]' COLUMNS (share_no FOR ORDINALITY, "
                    f"channel VARCHAR({MAX_KEY_LENGTH}) CHARACTER SET utf8mb4 "
                    f"COLLATE {collation} PATH '$[0]', share INT PATH '$[1]')"
                ),
            )
            .table_valued("share_no", "channel", "share")
            .alias("shares")
        )
        numbered = (
            sa.select(
                k.c.id,
                shares.c.share,
                sa.func.row_number()
                .over(partition_by=shares.c.share_no, order_by=k.c.id)
                .label("place"),
            )
            .select_from(
                shares.join(
                    k,
                    sa.and_(k.c.queue == _bind("ch_queue"), k.c.channel == shares.c.channel),
                ).join(m, m.c.id == k.c.id)
            )
            .where(
                m.c.ready_at == sa.literal(CHANNEL_READY, m.c.ready_at.type),
                m.c.next_attempt_at <= _bind("now", m.c.next_attempt_at.type),
                first_of_its_key(tables),
            )
            .prefix_with("STRAIGHT_JOIN")
            .with_hint(k, f"FORCE INDEX (ix_{m.name}_channel)")
            .subquery("numbered")
        )
        return sa.select(numbered.c.id).where(numbered.c.place <= numbered.c.share)

    def _mark(self, ids: Any) -> sa.Update:
        """PROCESSING for the messages `ids` (a SELECT of ids, or the :ids list) that
        are still ready: the UPDATE reads each row's latest version, so one a plain
        claim took meanwhile is left alone."""
        m = self.tables.message
        return (
            sa.update(m)
            .where(m.c.id.in_(ids), ready_predicate(m))
            .values(
                state=MessageState.PROCESSING,
                deliveries_count=m.c.deliveries_count + 1,
                claims_count=m.c.claims_count + 1,
                acquired_at=_bind("now", m.c.acquired_at.type),
            )
        )

    def take_shape(self, planned: Plan) -> TakeShape:
        """What the take of `planned` is made of: how many channels get a branch of
        their own, whether PLAIN gets one, and (MySQL with JSON_TABLE) whether a join
        takes the channels the read saw whole."""
        channels, plain = planned.shape
        if not self._joins_whole:
            return channels, plain, False
        taken = [m for m in planned.members if self._taken(m)]
        cut = sum(1 for m in taken if not m.whole)
        return cut, plain, cut < len(taken)

    def known_ids(self, planned: Plan) -> list[int]:
        """MySQL: the messages of the channels whose share is the one message the read
        already found (their first due one): no take needed for those."""
        return [m.due for m in planned.members if self._known(m)]

    def _known(self, member: Member) -> bool:
        return self._joins_whole and member.share == 1 and member.name != PLAIN

    def _taken(self, member: Member) -> bool:
        """A channel with a share the take must find."""
        return member.share > 0 and member.name != PLAIN and not self._known(member)

    @functools.cached_property
    def _joins_whole(self) -> bool:
        return self.mysql and bool(getattr(self.dialect, "json_table", False))

    @functools.cached_property
    def _streams(self) -> bool:
        """MariaDB: reads walk the channels streamed, bounded by `LIMIT ROWS EXAMINED`
        (known once the dialect has met its server)."""
        return self.mysql and bool(getattr(self.dialect, "limits_rows_examined", False))

    def statements(self, shape: TakeShape) -> Any:
        """The write for a shape, built once: PostgreSQL's single statement (the bump
        and the marking as CTEs; its first column says whether the bump applied), or
        elsewhere the take (a SELECT of ids) for the transaction to mark.

        PostgreSQL takes the channels' shares as two arrays and reaches each channel's
        messages through a LATERAL subquery per array element: one statement text for
        any number of channels, so it is prepared and planned once; a UNION ALL
        branch per channel was planned anew for every claim."""
        if self.dialect.name == "postgresql":
            shape = (-1, shape[1], False)
        found = self._by_shape.get(shape)
        if found is None:
            if self.dialect.name == "postgresql":
                found = self._single_write(self._pg_take(plain=shape[1]))
            elif self.mysql:
                # the ids (a derived table of integers), joined to their rows
                m = self.tables.message
                taken = self._take(shape).subquery("taken")
                found = (
                    sa.select(*claimed_columns(m))
                    .select_from(taken.join(m, m.c.id == taken.c.id))
                    .prefix_with("STRAIGHT_JOIN")
                )
            else:
                found = self._take(shape)
            self._by_shape[shape] = found
        return found

    def _pg_take(self, *, plain: bool) -> sa.Select:
        from sqlalchemy.dialects.postgresql import ARRAY

        tables, m = self.tables, self.tables.message
        shares = (
            sa.func.unnest(
                # asyncpg takes Python lists as arrays: no conversion on our side
                sa.cast(_bind("members", sa.types.NullType()), ARRAY(sa.Text())),
                sa.cast(_bind("takes", sa.types.NullType()), ARRAY(sa.Integer())),
            )
            .table_valued("channel", "n")
            .render_derived(name="shares")
        )
        oldest = (
            sa.select(m.c.id)
            .where(
                m.c.queue == _bind("ch_queue"),
                m.c.channel == shares.c.channel,
                ready_predicate(m),
                m.c.channel.isnot(None),
                m.c.next_attempt_at <= _bind("now", m.c.next_attempt_at.type),
                first_of_its_key(tables),
            )
            .order_by(m.c.next_attempt_at, m.c.id)
            .limit(shares.c.n)
            .lateral("oldest")
        )
        take = sa.select(oldest.c.id).select_from(shares.join(oldest, sa.true()))
        if not plain:
            return take
        return sa.union_all(  # type: ignore[return-value]
            take.subquery("channels").select(), self._branch(None).subquery("plain").select()
        )

    def _single_write(self, take: sa.Select) -> sa.Select:
        m = self.tables.message
        bump = self.bump.returning(self.tables.controls.c.version).cte("bump")
        marked = (
            self._mark(take)
            .where(sa.exists(sa.select(bump.c.version)))
            .returning(*claimed_columns(m, headers_as_text=True))
            .cte("marked")
        )
        one = sa.select(sa.literal_column("1").label("one")).subquery("one")
        applied = sa.select(sa.func.count()).select_from(bump).scalar_subquery()
        return sa.select(applied.label("applied"), *marked.c).select_from(
            one.outerjoin(marked, sa.true())
        )

    def upsert_window(self) -> Any:
        """A channel's rate window written, its row inserted if missing."""
        c = self.tables.controls
        values = {
            "queue": _bind("ch_queue"),
            "channel": _bind("w_channel", c.c.channel.type),
            "updated_at": _bind("now", c.c.updated_at.type),
            "rate_slot": _bind("w_slot", sa.BigInteger()),
            "rate_counts": _bind("w_counts", c.c.rate_counts.type),
        }
        name = self.dialect.name
        if name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            pg = pg_insert(c).values(**values)
            return pg.on_conflict_do_update(
                index_elements=[c.c.queue, c.c.channel],
                set_={"rate_slot": pg.excluded.rate_slot, "rate_counts": pg.excluded.rate_counts},
            )
        if name == "sqlite":
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert

            lite = sqlite_insert(c).values(**values)
            return lite.on_conflict_do_update(
                index_elements=[c.c.queue, c.c.channel],
                set_={
                    "rate_slot": lite.excluded.rate_slot,
                    "rate_counts": lite.excluded.rate_counts,
                },
            )
        from sqlalchemy.dialects.mysql import insert as mysql_insert

        my = mysql_insert(c).values(**values)
        return my.on_duplicate_key_update(
            rate_slot=my.inserted.rate_slot, rate_counts=my.inserted.rate_counts
        )

    def half_open_on_driver(
        self, statements: DriverStatements, dialect: SqlDialect
    ) -> tuple[DriverStatement, DriverStatement]:
        """`half_open` compiled for a driver's connection, every parameter given per
        call, kept in the dialect's `statements`."""
        mark, event = (
            statements.of(
                ("channel_probe", step), dialect, statement, tuple(statement.compile().params)
            )
            for step, statement in enumerate(self.half_open)
        )
        return mark, event

    @functools.cached_property
    def half_open(self) -> tuple[sa.Update, sa.Insert]:
        """For a channel whose breaker this claim probes (:p_channel): the breaker
        marked HALF_OPEN, another probe due only after :p_reopens; and the change in its
        history. The mark applies only if the breaker is still as the read found it
        (:p_from, due): a verdict, a reset or a new opening written since leaves it
        alone, and the claim must then be abandoned (`ProbeMissed`). `changed_at`
        becomes the claim's time (:now, the probe's acquired_at) when it leaves OPEN,
        and stays as it was for another probe of the same HALF_OPEN period, so a late
        verdict of the earlier probe still counts."""
        c, events = self.tables.controls, self.tables.breaker_events
        now = _bind("now", c.c.breaker_changed_at.type)
        was = _bind("p_from", c.c.breaker_state.type)
        opened = was == sa.literal_column(f"'{BreakerState.OPEN.value}'")
        half_open: sa.ColumnElement[str] = sa.literal_column(f"'{BreakerState.HALF_OPEN.value}'")
        mark = (
            c.update()
            .where(
                c.c.queue == _bind("ch_queue"),
                c.c.channel == _bind("p_channel", c.c.channel.type),
                c.c.breaker_state == was,
                c.c.breaker_reopens_at <= now,
            )
            .values(
                breaker_state=half_open,
                breaker_changed_at=sa.case((opened, now), else_=c.c.breaker_changed_at),
                breaker_reopens_at=_bind("p_reopens", c.c.breaker_reopens_at.type),
            )
        )
        event = events.insert().values(
            queue=_bind("ch_queue"),
            channel=_bind("p_channel", events.c.channel.type),
            from_state=_bind("p_from", events.c.from_state.type),
            to_state=half_open,
            reason=_bind("p_reason", events.c.reason.type),
            at=_bind("now", events.c.at.type),
        )
        return mark, event

    def insert_if_missing(self) -> Any:
        """An INSERT of a control row that does nothing where the row exists (another
        process may insert it at the same moment)."""
        c = self.tables.controls
        if self.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert

            return insert(c).on_conflict_do_nothing()
        if self.dialect.name == "sqlite":
            return sa.insert(c).prefix_with("OR IGNORE")
        from sqlalchemy.dialects.mysql import insert as mysql_insert

        # Not INSERT IGNORE: its skipped row is a server warning, which asyncmy fetches
        # with one more round trip and logs (on stderr in a plain script). Setting the
        # key to itself changes nothing and warns of nothing.
        return mysql_insert(c).on_duplicate_key_update(queue=c.c.queue)

    def write_parameters(self, queue: str, head: QueueRow, planned: Plan) -> dict[str, Any]:
        parameters: dict[str, Any] = {
            "ch_queue": queue,
            "now": head.now,
            "seen_version": head.version,
            "new_rotation": planned.rotation,
            "queue_slot": head.rate_slot,
            "queue_counts": head.rate_counts,
        }
        if planned.queue_window is not None:
            parameters["queue_slot"] = planned.queue_window.slot
            parameters["queue_counts"] = planned.queue_window.encode()
        shares = [m for m in planned.members if m.share > 0]
        for member in shares:
            if member.name == PLAIN:
                parameters["take_plain"] = member.share
                # the per-priority ranges' own parameters (_claim.ready_ids)
                parameters["claim_queue"], parameters["claim_limit"] = queue, member.share
        channels = [m for m in shares if m.name != PLAIN]
        if self.dialect.name == "postgresql":
            parameters["members"] = [m.name for m in channels]
            parameters["takes"] = [m.share for m in channels]
            return parameters
        if self._joins_whole:
            channels = [m for m in channels if self._taken(m)]
            whole = [[m.name, m.share] for m in channels if m.whole]
            if whole:
                parameters["ch_shares"] = json.dumps(whole)
            channels = [m for m in channels if not m.whole]
        for i, member in enumerate(channels):
            parameters[f"member_{i}"] = member.name
            parameters[f"take_{i}"] = member.share
        return parameters

    def window_parameters(self, queue: str, now: datetime, planned: Plan) -> list[dict[str, Any]]:
        return [
            {
                "ch_queue": queue,
                "now": now,
                "w_channel": name,
                "w_slot": after.slot,
                "w_counts": after.encode(),
            }
            for name, after, _stored in planned.windows
        ]

    def probe_parameters(self, queue: str, now: datetime, planned: Plan) -> list[dict[str, Any]]:
        return [
            {
                "ch_queue": queue,
                "now": now,
                "p_channel": name,
                "p_from": state,
                "p_reason": "cooldown over"
                if state == BreakerState.OPEN.value
                else "probe ended without a verdict",
                "p_reopens": now + timedelta(seconds=cooldown),
            }
            for name, cooldown, state in planned.probes
        ]

    # -- the read, on any connection -----------------------------------------------------
    async def read_with(
        self,
        queue: str,
        limit: int,
        run: Callable[[Hashable, Any, dict[str, Any]], Awaitable[Sequence[Any]]],
    ) -> tuple[QueueRow | None, list[Candidate]]:
        """The read of a claim of up to `limit` messages, split (`split_read`): `run(name,
        statement, parameters)` runs one statement on the caller's connection and
        returns its rows as mappings. Part 2 is left out while the queue's previous
        claim here did not need it, and read alone when this one turns out to. On
        MariaDB the walks are streamed, unless a recent streamed read of the queue was
        cut short (`_read_streamed`)."""
        parameters = self.read_parameters(queue, limit)
        wrapped = self._claims_wrap.get(queue, True)
        rows = None
        if self._streams and self._bounded_reads.get(queue, 0) <= 0:
            rows = await self._read_streamed(queue, wrapped, parameters, run)
        streamed = rows is not None
        if rows is None:
            if queue in self._bounded_reads:
                self._bounded_reads[queue] -= 1
            statement = self.read if wrapped else self.read_after_rotation
            rows = await run(("channel_read", wrapped), statement, parameters)
        head, candidates = split_read(rows)
        if head is None or head.paused:  # nothing is claimed: nothing to learn either
            return head, candidates
        head.streamed = streamed
        self._in_flight_seen[queue] = head.in_flight
        needed = wraps(candidates, limit, streamed=head.streamed)
        self._claims_wrap[queue] = needed
        if needed and not wrapped:
            more = await run("channel_read_from_start", self.read_from_start, parameters)
            candidates += [candidate(row) for row in sorted(more, key=lambda r: r["n"])]
        return head, candidates

    async def _read_streamed(
        self,
        queue: str,
        wrapped: bool,
        parameters: dict[str, Any],
        run: Callable[[Hashable, Any, dict[str, Any]], Awaitable[Sequence[Any]]],
    ) -> Sequence[Any] | None:
        """MariaDB: the read with streamed walks; None if the server cut it short (a
        channel with a long backlog in a walk's range), and the queue's next reads are
        then bounded, from the caller's one on (in the same snapshot)."""
        examined = int(
            (2 if wrapped else 1) * parameters["scan"] * EXAMINED_PER_SCANNED
            + self._in_flight_seen.get(queue, 0) * EXAMINED_PER_IN_FLIGHT
        )
        rows = await run(
            ("channel_read_streamed", wrapped),
            self.streamed_reads[wrapped],
            {"ch_queue": queue, "most": parameters["most"], "examined": examined},
        )
        if any(row["part"] == _COMPLETE for row in rows):
            self._cuts.pop(queue, None)
            return rows
        cuts = self._cuts[queue] = self._cuts.get(queue, 0) + 1
        self._bounded_reads[queue] = BOUNDED_AFTER_CUT * min(2 ** (cuts - 1), BOUNDED_AFTER_CUTS)
        return None

    def read_parameters(self, queue: str, limit: int) -> dict[str, Any]:
        """The read's parameters for a claim of up to `limit` messages."""
        most = limit + EXTRA_CANDIDATES
        parameters = {"ch_queue": queue, "most": most}
        if self.mysql:
            parameters["scan"] = most * SCAN_PER_CANDIDATE
        return parameters

    # -- a claim on SQLAlchemy's connection (SQLite) ------------------------------------
    async def write_on(
        self, conn: AsyncConnection, queue: str, head: QueueRow, planned: Plan
    ) -> list[Sequence[Any]] | None:
        """The write in the caller's transaction; None if the version moved."""
        parameters = self.write_parameters(queue, head, planned)
        bumped = await conn.execute(self.bump, parameters)
        if bumped.rowcount == 0:
            return None
        for window_row in self.window_parameters(queue, head.now, planned):
            await conn.execute(self.upsert_window(), window_row)
        for probe_row in self.probe_parameters(queue, head.now, planned):
            mark, event = self.half_open
            if (await conn.execute(mark, probe_row)).rowcount != 1:
                raise ProbeMissed(probe_row["p_channel"])
            await conn.execute(event, probe_row)
        if planned.shape == (0, False):
            return []  # the rotation moved past channels with no room
        # SQLite (MySQL and PostgreSQL claim on their drivers' connections, in their
        # dialects): the take marked by an UPDATE ... RETURNING
        take = self.statements(self.take_shape(planned))
        marked = self._mark(take).returning(*claimed_columns(self.tables.message))
        return [tuple(row) for row in await conn.execute(marked, parameters)]


class ChannelSession(Protocol):
    """A channel claim on one connection (Dialect.channel_session): its read, then its
    write, which changes nothing if the queue row's version moved since the read."""

    async def read(self, queue: str, limit: int) -> tuple[QueueRow | None, list[Candidate]]:
        """`ChannelClaim.read_with` on this connection."""

    async def write(self, queue: str, head: QueueRow, planned: Plan) -> list[Sequence[Any]] | None:
        """The claimed rows; None if the version moved (or ProbeMissed)."""


class ConnectionSession:
    """A channel claim's session on SQLAlchemy's connection, in the caller's
    transaction (SQLite)."""

    def __init__(self, claim: ChannelClaim, conn: AsyncConnection) -> None:
        self.claim, self.conn = claim, conn

    async def read(self, queue: str, limit: int) -> tuple[QueueRow | None, list[Candidate]]:
        conn = self.conn

        async def run(_name: Hashable, statement: Any, parameters: dict[str, Any]) -> Any:
            return (await conn.execute(statement, parameters)).mappings().all()

        return await self.claim.read_with(queue, limit, run)

    async def write(self, queue: str, head: QueueRow, planned: Plan) -> list[Sequence[Any]] | None:
        return await self.claim.write_on(self.conn, queue, head, planned)


_DELIVERIES = CLAIMED_COLUMNS.index("deliveries_count")
_CLAIMS = CLAIMED_COLUMNS.index("claims_count")
_ACQUIRED = CLAIMED_COLUMNS.index("acquired_at")


def as_claimed(row: Sequence[Any], now: datetime) -> tuple[Any, ...]:
    """A row read just before its claim's UPDATE, as that UPDATE leaves it."""
    values = list(row)
    values[_DELIVERIES] += 1
    values[_CLAIMS] += 1
    values[_ACQUIRED] = now
    return tuple(values)


def split_read(rows: Sequence[Any]) -> tuple[QueueRow | None, list[Candidate]]:
    """The read's queue row (None if the queue has none), with the in-flight counts,
    and its candidates, in the read's order (after the rotation, then from the start)."""
    head_row = next((row for row in rows if row["part"] == 0), None)
    busy = {row["channel"]: int(row["n"]) for row in rows if row["part"] == 3}
    candidates = [
        candidate(row)
        for row in sorted(
            (row for row in rows if row["part"] in (1, 2)), key=lambda r: (r["part"], r["n"])
        )
    ]
    if head_row is None:
        return None, candidates
    head = _queue_row(head_row)
    head.in_flight = sum(busy.values())
    head.busy = busy
    return head, candidates


async def create_queue_row(dialect: Dialect, engine: AsyncEngine, queue: str) -> None:
    """The queue's control row, which every channel claim's write counts up."""
    async with dialect.own_transaction(engine) as conn:
        await conn.execute(
            dialect.channel_claim.insert_if_missing().values(
                queue=queue, channel=WHOLE_QUEUE, updated_at=utc_now()
            )
        )


async def write_planned(
    session: ChannelSession,
    queue: str,
    read: tuple[QueueRow, list[Candidate]],
    limit: int,
    *,
    channel_breakers: bool,
) -> list[Sequence[Any]] | None:
    """Plan a claim of up to `limit` from its read and write it; [] if the read leaves
    nothing to claim, None if the version moved."""
    head, candidates = read
    planned = plan(head, candidates, limit, channel_breakers=channel_breakers)
    if planned is None:
        return []
    return await session.write(queue, head, planned)


async def claim_once(
    dialect: Dialect, engine: AsyncEngine, queue: str, limit: int, *, channel_breakers: bool
) -> list[Sequence[Any]] | None:
    """One try of the claim: a read, then a write in its session; None if another
    claim changed the queue, or a channel's breaker, in between."""
    try:
        async with dialect.channel_session(engine) as session:
            head, candidates = await session.read(queue, limit)
            if head is not None:
                return await write_planned(
                    session, queue, (head, candidates), limit, channel_breakers=channel_breakers
                )
    except ProbeMissed:
        return None  # rolled back: read again
    await create_queue_row(dialect, engine, queue)
    return None


async def claim_channelled(
    dialect: Dialect,
    engine: AsyncEngine,
    queue: str,
    limit: int,
    *,
    channel_breakers: bool = False,
    ahead: ReadAhead | None = None,
) -> list[Sequence[Any]]:
    """Up to `limit` messages of `queue` within its limits and its channels' (see the
    module), as claimed rows in `schema.CLAIMED_COLUMNS` order; `channel_breakers`:
    the channels' own breakers hold them too (see `plan`). `ahead`: this claim's read,
    made while the workers were busy (read_ahead), used if it still may be."""
    if ahead is not None:
        rows = await ahead.claim(limit, channel_breakers=channel_breakers)
        if rows:
            return rows
    for _ in range(CONFLICT_RETRIES):
        rows = await claim_once(dialect, engine, queue, limit, channel_breakers=channel_breakers)
        if rows is not None:
            return rows
    return []  # others kept claiming: the next round comes soon


__all__ = [
    "ChannelClaim",
    "ChannelSession",
    "ConnectionSession",
    "ProbeMissed",
    "as_claimed",
    "candidate",
    "claim_channelled",
    "claim_once",
    "create_queue_row",
    "split_read",
    "write_planned",
]
