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

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

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
    NOT_READY,
    PRIORITIES,
    WHOLE_QUEUE,
    MessageState,
    QueueTables,
)

from . import rate as window
from .limits import Rate

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from faststream_sqla.dialects import Dialect

#: channels read per claim beyond its limit: room to pass over full or paused ones
EXTRA_CANDIDATES = 8
#: MySQL: keys-index entries read per candidate channel wanted (see _mysql_walk)
SCAN_PER_CANDIDATE = 20
#: the rotation's name for the messages without a channel
PLAIN = ""
#: reads a claim makes when other claims keep moving the queue's version meanwhile
CONFLICT_RETRIES = 4


def _rate(count: int | None, period: float | None) -> Rate | None:
    return None if count is None or period is None else Rate(count, period)


@dataclass
class Member:
    """One channel (or PLAIN) as this claim sees it."""

    name: str
    in_flight: int = 0
    #: its control row exists
    stored: bool = False
    paused: bool = False
    max_concurrency: int | None = None
    rate: Rate | None = None
    rate_slot: int | None = None
    rate_counts: str | None = None
    window: window.Window | None = None
    share: int = 0

    def room(self, now: float) -> int | None:
        """What its limits let it start now (None: no limit)."""
        room: int | None = None
        if self.max_concurrency is not None:
            room = max(0, self.max_concurrency - self.in_flight)
        if self.rate is not None:
            self.window = window.window_at(self.rate_slot, self.rate_counts, self.rate, now)
            allowed = window.allowance(self.window, self.rate)
            room = allowed if room is None else min(room, allowed)
        return room


@dataclass
class QueueRow:
    """The queue's control row, as the read found it, with the read's totals."""

    paused: bool = False
    max_concurrency: int | None = None
    rate: Rate | None = None
    rate_slot: int | None = None
    rate_counts: str | None = None
    channel_max_concurrency: int | None = None
    channel_rate: Rate | None = None
    rotation: str | None = None
    version: int = 0
    in_flight: int = 0
    #: messages without a channel are due
    plain_waiting: bool = False
    #: in flight, per channel (None: without one)
    busy: dict[str | None, int] = field(default_factory=dict)
    now: datetime = field(default_factory=lambda: datetime(1970, 1, 1))


@dataclass
class Plan:
    """What one claim writes."""

    members: list[Member]
    rotation: str | None
    queue_window: window.Window | None
    #: (channel, window after this claim, whether its row exists) for rate-limited ones
    windows: list[tuple[str, window.Window, bool]]

    @property
    def shape(self) -> tuple[int, bool]:
        """How many channels get a share, and whether PLAIN does."""
        channels = sum(1 for m in self.members if m.share > 0 and m.name != PLAIN)
        plain = any(m.share > 0 and m.name == PLAIN for m in self.members)
        return channels, plain


def share_out(members: Sequence[Member], limit: int, queue_room: int | None, now: float) -> int:
    """Give each member its share of `limit` in turns, one message a turn, in order,
    within its room and the queue's; the total given. Paused members get none."""
    total = limit if queue_room is None else min(limit, queue_room)
    rooms = {id(m): (None if m.paused else m.room(now)) for m in members}
    open_members = [m for m in members if not m.paused and rooms[id(m)] != 0]
    given = 0
    while given < total and open_members:
        still_open = []
        for member in open_members:
            if given >= total:
                break
            member.share += 1
            given += 1
            room = rooms[id(member)]
            if room is None or member.share < room:
                still_open.append(member)
        open_members = still_open
    return given


def _seconds(when: datetime) -> float:
    return when.replace(tzinfo=timezone.utc).timestamp()


def plan(head: QueueRow, candidates: Sequence[Any], limit: int) -> Plan | None:
    """Share up to `limit` among the read's candidates (rows of the read's parts 1 and
    2: after the rotation, and from the start); None if nothing may be claimed."""
    if head.paused or limit <= 0:
        return None
    now = _seconds(head.now)
    queue_room: int | None = None
    if head.max_concurrency is not None:
        queue_room = max(0, head.max_concurrency - head.in_flight)
    queue_window = None
    if head.rate is not None:
        queue_window = window.window_at(head.rate_slot, head.rate_counts, head.rate, now)
        allowed = window.allowance(queue_window, head.rate)
        queue_room = allowed if queue_room is None else min(queue_room, allowed)
    if queue_room == 0:
        return None
    rotation = head.rotation or PLAIN
    after = [row for row in candidates if row["part"] == 1]
    members = [_member(row, head) for row in after]
    # The messages without a channel and the channels from the start (up to where this
    # turn began: the read keeps to those) take their turn only once this round has
    # reached its last channel; a full list may have more after it.
    most = limit + EXTRA_CANDIDATES
    entries = sum(row["in_flight"] or 0 for row in after)  # MySQL: keys read
    if len(after) < most and entries < most * SCAN_PER_CANDIDATE:
        seen = {row["channel"] for row in after}
        members.append(Member(PLAIN, paused=not head.plain_waiting))
        members += [
            _member(row, head)
            for row in candidates
            if row["part"] == 2 and rotation != PLAIN and row["channel"] not in seen
        ]
    if share_out(members, limit, queue_room, now) == 0:
        # Every channel looked at is full, paused, out of rate or not due: the
        # rotation moves past them, or the channels after them would never be read.
        channels = [m.name for m in members if m.name != PLAIN]
        passed = after[-1]["channel"] if after else (channels[-1] if channels else None)
        if passed is None or passed == rotation:
            return None
        return Plan(members, passed, None, [])
    last = rotation
    windows = []
    for member in members:
        if member.share:
            last = member.name
            if member.window is not None and member.name != PLAIN:
                after_claim = window.taken(member.window, member.share)
                windows.append((member.name, after_claim, member.stored))
    if queue_window is not None:
        queue_window = window.taken(queue_window, sum(m.share for m in members))
    return Plan(members, last, queue_window, windows)


def _member(row: Any, head: QueueRow) -> Member:
    member = Member(
        row["channel"],
        in_flight=head.busy.get(row["channel"], 0),
        stored=bool(row["stored"]),
        # nothing due: no share (the plain_waiting column carries `due` here)
        paused=bool(row["paused"]) or not row["plain_waiting"],
        max_concurrency=head.channel_max_concurrency,
        rate=head.channel_rate,
        rate_slot=row["rate_slot"],
        rate_counts=row["rate_counts"],
    )
    if row["max_concurrency"] is not None:
        member.max_concurrency = row["max_concurrency"]
    own_rate = _rate(row["rate_count"], row["rate_period"])
    if own_rate is not None:
        member.rate = own_rate
    return member


def _queue_row(row: Any) -> QueueRow:
    now = row["now"]
    if not isinstance(now, datetime):  # SQLite's text
        now = datetime.fromisoformat(now)
    return QueueRow(
        paused=bool(row["paused"]),
        max_concurrency=row["max_concurrency"],
        rate=_rate(row["rate_count"], row["rate_period"]),
        rate_slot=row["rate_slot"],
        rate_counts=row["rate_counts"],
        channel_max_concurrency=row["channel_max_concurrency"],
        channel_rate=_rate(row["channel_rate_count"], row["channel_rate_period"]),
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
        m = tables.message
        self.read = self._build_read()
        self._by_shape: dict[tuple[int, bool], Any] = {}
        self._mark_listed = self._mark(sa.bindparam("ids", expanding=True))
        self._read_marked = sa.select(*claimed_columns(m)).where(
            m.c.id.in_(sa.bindparam("ids", expanding=True)),
            m.c.state == state_literal(MessageState.PROCESSING),
            m.c.acquired_at == _bind("now", m.c.acquired_at.type),
        )
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

    def _channel_due(self, channel: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
        """Whether `channel` has a message due now: a channel whose messages are all
        delayed (or, on MySQL, all in flight) gets no share of the claim."""
        tables, m = self.tables, self.tables.message
        due = m.c.next_attempt_at <= utc_now()
        # A scalar "SELECT 1 ... LIMIT 1" (1 or NULL), not EXISTS: PostgreSQL may run an
        # EXISTS as a hash of every channel's due messages, built each claim.
        found: sa.Select[Any]
        if tables.keys is not None:
            k = tables.keys
            # stops at the first due one; a channel whose entries are all delayed or in
            # flight is read whole
            found = (
                sa.select(sa.literal_column("1"))
                .select_from(k.join(m, m.c.id == k.c.id))
                .where(
                    k.c.queue == _bind("ch_queue"),
                    k.c.channel == channel,
                    m.c.ready_at == sa.literal(CHANNEL_READY, m.c.ready_at.type),
                    due,
                )
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
        self, name: str, start: sa.ColumnElement[str], stop: sa.ColumnElement[str] | None
    ) -> Any:
        """The channels after `start` (and up to `stop`) with live (PostgreSQL, SQLite:
        ready) messages, in order, at most :most, as (channel, n, entries): one index
        descent each. MySQL's keys table holds every channelled message; elsewhere the
        channel index holds the ready ones. `stop` is compared by the database, in its
        collation, as it orders the channels."""
        tables = self.tables
        if tables.keys is not None:
            return self._mysql_walk(name, start, stop)
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
        self, name: str, start: sa.ColumnElement[str], stop: sa.ColumnElement[str] | None
    ) -> Any:
        """MariaDB evaluates the recursive walk's step as a walk of the queue's whole
        key range (no range access on a correlated bound), so there the channels come
        from one range of the keys index after `start`, read no further than :scan
        entries; `entries` counts what was read of each, so the plan can tell a range
        cut short (the rotation then stops at its end) from the end of the queue."""
        k = self.tables.keys
        assert k is not None
        bounds = [k.c.queue == _bind("ch_queue"), k.c.channel > start]
        if stop is not None:
            bounds.append(k.c.channel <= stop)
        head = (
            sa.select(k.c.channel)
            .with_hint(k, f"FORCE INDEX (ix_{self.tables.message.name}_channel)")
            .where(*bounds)
            .order_by(k.c.channel)
            .limit(_bind("scan", sa.Integer()))
            .subquery(f"{name}_head")
        )
        distinct = (
            sa.select(head.c.channel, sa.func.count().label("entries"))
            .group_by(head.c.channel)
            .order_by(head.c.channel)
            .limit(_bind("most", sa.Integer()))
            .subquery(f"{name}_channels")
        )
        # numbered in order, as the recursive walk numbers them
        return sa.select(
            distinct.c.channel,
            sa.func.row_number().over(order_by=distinct.c.channel).label("n"),
            distinct.c.entries,
        ).subquery(name)

    def _build_read(self) -> sa.CompoundSelect:
        """Part 0: the queue's row; parts 1 and 2: the channels after the rotation and
        from the start, each with its control row; part 3: the messages in flight, per
        channel (`n`; the channel NULL for those without one). The in-flight counts
        come as rows of their own, not joined: MariaDB computed a shared CTE once per
        use."""
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
        ).where(*is_queue_row)

        def channels(part: int, walk: Any) -> sa.Select:
            row = c.alias(f"channel_row_{part}")
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
                )
                .select_from(
                    walk.outerjoin(
                        row,
                        sa.and_(row.c.queue == _bind("ch_queue"), row.c.channel == walk.c.channel),
                    )
                )
                .where(walk.c.channel.isnot(None))
            )

        after = self._walk("after_rotation", sa.func.coalesce(rotation, WHOLE_QUEUE), None)
        wrapped = self._walk(
            "from_start",
            sa.literal(WHOLE_QUEUE, m.c.channel.type),
            sa.func.coalesce(rotation, WHOLE_QUEUE),
        )
        nothing = [sa.null()] * 15
        busy = (
            sa.select(sa.literal_column("3"), sa.func.count(), m.c.channel, *nothing)
            .where(*self._in_flight())
            .group_by(m.c.channel)
        )
        return sa.union_all(head, channels(1, after), channels(2, wrapped), busy)

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

    def _take(self, channels: int, plain: bool) -> sa.Select:
        """`channels` members' branches and PLAIN's, as one UNION ALL."""
        wanted: list[int | None] = [*range(channels), *([None] if plain else [])]
        if self.mysql:
            # (SELECT ... LIMIT n) UNION ALL (...): no derived table per branch
            branches = [self._branch(i) for i in wanted]
        else:  # SQLite takes a compound's LIMIT only outside it
            branches = [
                self._branch(i).subquery(f"b{'p' if i is None else i}").select() for i in wanted
            ]
        if len(branches) == 1:
            return branches[0]
        return sa.union_all(*branches)  # type: ignore[return-value]

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

    def statements(self, shape: tuple[int, bool]) -> Any:
        """The write for a shape, built once: PostgreSQL's single statement (the bump
        and the marking as CTEs; its first column says whether the bump applied), or
        elsewhere the take (a SELECT of ids) for the transaction to mark.

        PostgreSQL takes the channels' shares as two arrays and reaches each channel's
        messages through a LATERAL subquery per array element: one statement text for
        any number of channels, so it is prepared and planned once; a UNION ALL
        branch per channel was planned anew for every claim."""
        if self.dialect.name == "postgresql":
            shape = (-1, shape[1])
        found = self._by_shape.get(shape)
        if found is None:
            if self.dialect.name == "postgresql":
                found = self._single_write(self._pg_take(plain=shape[1]))
            elif self.mysql:
                # the ids (a derived table of integers), joined to their rows
                m = self.tables.message
                taken = self._take(*shape).subquery("taken")
                found = (
                    sa.select(*claimed_columns(m))
                    .select_from(taken.join(m, m.c.id == taken.c.id))
                    .prefix_with("STRAIGHT_JOIN")
                )
            else:
                found = self._take(*shape)
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

    def insert_if_missing(self) -> Any:
        """An INSERT of a control row that does nothing where the row exists (another
        process may insert it at the same moment)."""
        c = self.tables.controls
        if self.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert

            return insert(c).on_conflict_do_nothing()
        return (
            sa.insert(c)
            .prefix_with("OR IGNORE", dialect="sqlite")
            .prefix_with("IGNORE", dialect="mysql")
            .prefix_with("IGNORE", dialect="mariadb")
        )

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
        else:
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

    # -- a claim on SQLAlchemy's connection (MySQL, SQLite) -----------------------------
    async def read_on(self, conn: AsyncConnection, queue: str, limit: int) -> Any:
        most = limit + EXTRA_CANDIDATES
        parameters = {"ch_queue": queue, "most": most}
        if self.mysql:
            parameters["scan"] = most * SCAN_PER_CANDIDATE
        result = await conn.execute(self.read, parameters)
        return result.mappings().all()

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
        if planned.shape == (0, False):
            return []  # the rotation moved past channels with no room
        take = self.statements(planned.shape)
        if self.dialect.name == "sqlite":
            marked = self._mark(take).returning(*claimed_columns(self.tables.message))
            return [tuple(row) for row in await conn.execute(marked, parameters)]
        # MySQL: no UPDATE ... RETURNING. The rows are read without locks (a locking
        # read of the keys index would wait for publishers' uncommitted rows), then
        # marked. Read as they will stand once marked, unless the UPDATE found some no
        # longer ready (a plain claim took a message without a channel meanwhile):
        # then what it took is read back (acquired_at is this claim's time, and the
        # bump keeps other channel claims of the queue out).
        taken = (await conn.execute(take, parameters)).all()
        if not taken:
            return []
        ids = [row[0] for row in taken]
        updated = await conn.execute(self._mark_listed, {"ids": ids, "now": head.now})
        if updated.rowcount == len(ids):
            return [_as_claimed(row, head.now) for row in taken]
        rows = await conn.execute(self._read_marked, {"ids": ids, "now": head.now})
        return [tuple(row) for row in rows]


_DELIVERIES = CLAIMED_COLUMNS.index("deliveries_count")
_CLAIMS = CLAIMED_COLUMNS.index("claims_count")
_ACQUIRED = CLAIMED_COLUMNS.index("acquired_at")


def _as_claimed(row: Sequence[Any], now: datetime) -> tuple[Any, ...]:
    """A row read just before its claim's UPDATE, as that UPDATE leaves it."""
    values = list(row)
    values[_DELIVERIES] += 1
    values[_CLAIMS] += 1
    values[_ACQUIRED] = now
    return tuple(values)


def split_read(rows: Sequence[Any]) -> tuple[QueueRow | None, list[Any]]:
    """The read's queue row (None if the queue has none), with the in-flight counts,
    and its candidate rows, each a mapping of the read's columns."""
    head_row = next((row for row in rows if row["part"] == 0), None)
    busy = {row["channel"]: int(row["n"]) for row in rows if row["part"] == 3}
    candidates = sorted(
        (row for row in rows if row["part"] in (1, 2)), key=lambda r: (r["part"], r["n"])
    )
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


async def claim_channelled(
    dialect: Dialect, engine: AsyncEngine, queue: str, limit: int
) -> list[Sequence[Any]]:
    """Up to `limit` messages of `queue` within its limits and its channels' (see the
    module), as claimed rows in `schema.CLAIMED_COLUMNS` order."""
    for _ in range(CONFLICT_RETRIES):
        rows = await dialect.claim_channels(engine, queue, limit)
        if rows is not None:
            return rows
    return []  # others kept claiming: the next round comes soon


__all__ = [
    "ChannelClaim",
    "Member",
    "Plan",
    "QueueRow",
    "claim_channelled",
    "create_queue_row",
    "plan",
    "share_out",
    "split_read",
]
