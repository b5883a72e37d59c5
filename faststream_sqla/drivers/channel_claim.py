"""The channel claim's statements: what every database shares, and the hooks where
each one differs (its own subclass, in `<database>/channel_claim.py`, says how).

A claim is one read and one write, ordered by the queue row's `version`
(faststream_sqla.channels.claim runs them; channels.plan decides between them):

1. **Read** (one statement, no lock): the queue's control row (its limits, rate
   window, rotation and version), how many of its messages are in flight, whether
   messages without a channel are due, the database's time, and the next channels
   with ready messages after the rotation (the channel served last), one index
   descent each, with each one's control row and in-flight count. Its rows come back
   typed (`split_read`): a `QueueRow` and `Candidate`s.
2. **Write** (PostgreSQL: one statement; elsewhere one transaction): count the
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
from collections.abc import Awaitable, Callable, Hashable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from faststream_sqla.channels.groups import SEPARATOR
from faststream_sqla.channels.plan import (
    EXTRA_CANDIDATES,
    PLAIN,
    Candidate,
    Member,
    Plan,
    QueueRow,
    rate_of,
    wraps,
)
from faststream_sqla.clock import utc_now
from faststream_sqla.schema import (
    CLAIMED_COLUMNS,
    PRIORITIES,
    WHOLE_QUEUE,
    BreakerState,
    MessageState,
    QueueTables,
)

from ._claim import first_of_its_key, priority_literal, ready_ids, ready_predicate, state_literal

if TYPE_CHECKING:
    from sqlalchemy.engine import Dialect as SqlDialect
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from faststream_sqla.channels.limits import LimitsWrite
    from faststream_sqla.message import ClaimedMessage

    from ._compiled import DriverStatement, DriverStatements
    from .base import Driver

#: a take's statement: channels with a branch of their own, whether PLAIN has one, and
#: whether a join takes the channels the read saw whole (ChannelClaim.take_shape)
TakeShape = tuple[int, bool, bool]

#: the read's columns, in order, for every part of its UNION ALL (`ChannelClaim._part`)
#: - part: 0 the queue's row, 1 a channel after the rotation, 2 one from the start,
#:   3 the in-flight count of one channel (n; channel NULL for those without one),
#:   4 (MariaDB's streamed read) the mark that the read was not cut short
#: - n: a channel's place in its walk; part 3: its count
#: - entries: MariaDB, the keys-index entries the walk read of a channel
#: - due: the queue's row: whether messages without a channel are due; a channel's:
#:   whether it has a due message (MariaDB: the id of the first)
READ_COLUMNS = (
    "part",
    "n",
    "channel",
    "stored",
    "paused",
    "max_concurrency",
    "rate_count",
    "rate_period",
    "rate_slot",
    "rate_counts",
    "channel_max_concurrency",
    "channel_rate_count",
    "channel_rate_period",
    "rotation",
    "version",
    "entries",
    "due",
    "now",
    "breaker",
    "reopened",
    "breaker_since",
    "breaker_until",
    "group_stored",
    "group_paused",
    "group_max_concurrency",
    "group_rate_count",
    "group_rate_period",
    "group_rate_slot",
    "group_rate_counts",
)

#: runs one statement of a claim's read on the session's connection: (name to cache its
#: compiled form by, statement, parameters) -> rows as mappings
RunRead = Callable[[Hashable, Any, dict[str, Any]], Awaitable[Sequence[Any]]]


class ChannelSession(Protocol):
    """A channel claim on one connection (Driver.channel_session): its read, then its
    write, which changes nothing if the queue row's version moved since the read."""

    async def read(self, queue: str, limit: int) -> tuple[QueueRow | None, list[Candidate]]:
        """The queue's row (None: it has none yet) and the channels with due messages."""

    async def write(self, queue: str, head: QueueRow, planned: Plan) -> list[ClaimedMessage] | None:
        """The claimed rows; None if the version moved (or ProbeMissed)."""


def as_time(value: Any) -> datetime:
    """A time the read returned: SQLite's come as text."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def _time_or_none(value: Any) -> datetime | None:
    return None if value is None else as_time(value)


def candidate(row: Any) -> Candidate:
    """A channel row of the read (its parts 1 and 2) as the plan takes it."""
    return Candidate(
        channel=row["channel"],
        after_rotation=row["part"] == 1,
        stored=bool(row["stored"]),
        paused=bool(row["paused"]),
        due=row["due"],
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
        keys_read=row["entries"] or 0,
    )


def _queue_row(row: Any) -> QueueRow:
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
        plain_waiting=bool(row["due"]),
        now=as_time(row["now"]),
    )


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


class _separator_at(FunctionElement[int]):
    """The 1-based position of the first `/` in a text (0: none)."""

    type = sa.Integer()
    inherit_cache = True
    name = "separator_at"


@compiles(_separator_at, "postgresql")
def _strpos(element: _separator_at, compiler: Any, **kw: Any) -> str:
    (text,) = element.clauses
    return f"strpos({compiler.process(text, **kw)}, '{SEPARATOR}')"


@compiles(_separator_at)
def _instr(element: _separator_at, compiler: Any, **kw: Any) -> str:
    # SQLite's and MySQL's instr(text, what)
    (text,) = element.clauses
    return f"instr({compiler.process(text, **kw)}, '{SEPARATOR}')"


def group_key(channel: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
    """`channels.groups.group_of` in SQL: the group's name, or '' (the queue's own
    row's key: callers must tell the two apart) for a channel in no group."""
    return sa.func.substr(channel, 1, _separator_at(channel))


def bind(name: str, type_: Any = None) -> sa.BindParameter[Any]:
    return sa.bindparam(name, type_=type_)


def _limits_of(row: Any, prefix: str = "") -> dict[str, Any]:
    """A control row's limits, as the read's columns named with `prefix`; `stored`:
    whether the row exists (an outer join's)."""
    names = ("paused", "max_concurrency", "rate_count", "rate_period", "rate_slot", "rate_counts")
    return {
        f"{prefix}stored": row.c.queue.isnot(None),
        **{f"{prefix}{name}": row.c[name] for name in names},
    }


class ChannelClaim:
    """The statements of the channel claim for one set of tables, built once (the
    write, once per shape: how many channels get a share). A database's subclass
    gives its write (`statements`, `upsert_window`, `insert_if_missing`, `session`)
    and overrides the parts of the read it runs differently."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.tables: QueueTables = driver.tables
        self.read = self._build_read()
        # The read's part 2 (the channels from the start) is needed only when a claim
        # reaches the end of the channels: with many channels, one claim in many. Each
        # queue's read leaves it out while the claim before did not need it, and the
        # claim reads it alone when it turns out to be needed after all (`read_with`).
        self.read_after_rotation = self._build_read(wrapped=False)
        self.read_from_start = self._build_read(wrapped=True, alone=True)
        #: per queue: whether its last claim here went on to the channels from the start
        self._claims_wrap: dict[str, bool] = {}
        self._by_shape: dict[TakeShape, Any] = {}
        self.bump = self._build_bump()

    def session(self, engine: AsyncEngine) -> AbstractAsyncContextManager[ChannelSession]:
        """A claim's read and write on one connection (Driver.channel_session)."""
        raise NotImplementedError

    # -- the read -----------------------------------------------------------------------
    def _in_flight(self) -> list[sa.ColumnElement[bool]]:
        """The queue's PROCESSING rows, through the index that holds them."""
        m = self.tables.message
        return [m.c.queue == bind("ch_queue"), m.c.state == state_literal(MessageState.PROCESSING)]

    def _plain_waiting(self) -> sa.ColumnElement[bool]:
        """Whether messages without a channel are due: the claim index's first due
        entry."""
        m = self.tables.message
        due = [ready_predicate(m), m.c.channel.is_(None), m.c.next_attempt_at <= utc_now()]
        return sa.exists().where(m.c.queue == bind("ch_queue"), *due)

    def _channel_due(self, channel: sa.ColumnElement[str]) -> sa.ColumnElement[Any]:
        """Whether `channel` has a message due now: a channel whose messages are all
        delayed gets no share of the claim."""
        m = self.tables.message
        # A scalar "SELECT 1 ... LIMIT 1" (1 or NULL), not EXISTS: PostgreSQL may run an
        # EXISTS as a hash of every channel's due messages, built each claim.
        found: sa.Select[Any] = sa.select(sa.literal_column("1")).where(
            m.c.queue == bind("ch_queue"),
            m.c.channel == channel,
            ready_predicate(m),
            m.c.channel.isnot(None),
            m.c.next_attempt_at <= utc_now(),
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
        """The channels after `start` (and up to `stop`) with ready messages, in
        order, at most :most, as (channel, n, entries): one descent of the channel
        index each, by a recursive query. `stop` is compared by the database, in its
        collation, as it orders the channels."""
        source = self.tables.message

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
                first_table.c.queue == bind("ch_queue"),
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
                next_table.c.queue == bind("ch_queue"),
                next_table.c.channel > walk.c.channel,
                *ready(next_table),
            )
            .order_by(next_table.c.channel)
            .limit(1)
            .scalar_subquery()
        )
        return walk.union_all(
            sa.select(following, walk.c.n + 1, sa.null()).where(
                walk.c.channel.isnot(None), walk.c.n < bind("most", sa.Integer())
            )
        )

    def _busy(self) -> sa.Select:
        """Part 3: the queue's messages in flight, counted per channel."""
        m = self.tables.message
        return (
            sa.select(*self._part(3, n=sa.func.count(), channel=m.c.channel))
            .where(*self._in_flight())
            .group_by(m.c.channel)
        )

    def _part(self, part: int, *, typed: bool = False, **columns: Any) -> list[Any]:
        """One part's select list in READ_COLUMNS order, by name: NULL where it says
        nothing. `typed`: the first part of the UNION, whose NULLs carry the types the
        later parts' values have."""
        given = {"part": sa.literal_column(str(part)), **columns}
        unknown = set(given) - set(READ_COLUMNS)
        assert not unknown, f"not a column of the channel read: {sorted(unknown)}"
        c, m = self.tables.controls, self.tables.message
        null_types = {
            "channel": m.c.channel.type,
            "breaker": c.c.breaker_state.type,
            "breaker_since": c.c.breaker_changed_at.type,
            "breaker_until": c.c.breaker_reopens_at.type,
            "group_rate_counts": c.c.rate_counts.type,
        }

        def null(name: str) -> Any:
            if typed and name in null_types:
                return sa.cast(sa.null(), null_types[name])
            return sa.null()

        return [(given[name] if name in given else null(name)).label(name) for name in READ_COLUMNS]

    def _read_parts(self, *, wrapped: bool, alone: bool, streamed: bool) -> list[sa.Select]:
        """Part 0: the queue's row; parts 1 and 2: the channels after the rotation and
        from the start, each with its control row; part 3: the messages in flight, per
        channel. The in-flight counts come as rows of their own, not joined: MariaDB
        computed a shared CTE once per use. Without `wrapped`, no part 2; `alone`,
        part 2 only."""
        c, m = self.tables.controls, self.tables.message
        queue_row = c.alias("queue_row")
        rotation = (
            sa.select(c.c.rotation)
            .where(c.c.queue == bind("ch_queue"), c.c.channel == WHOLE_QUEUE)
            .scalar_subquery()
        )
        head = sa.select(
            *self._part(
                0,
                typed=True,
                n=sa.literal_column("0"),
                stored=sa.true(),
                paused=queue_row.c.paused,
                max_concurrency=queue_row.c.max_concurrency,
                rate_count=queue_row.c.rate_count,
                rate_period=queue_row.c.rate_period,
                rate_slot=queue_row.c.rate_slot,
                rate_counts=queue_row.c.rate_counts,
                channel_max_concurrency=queue_row.c.channel_max_concurrency,
                channel_rate_count=queue_row.c.channel_rate_count,
                channel_rate_period=queue_row.c.channel_rate_period,
                rotation=queue_row.c.rotation,
                version=queue_row.c.version,
                due=self._plain_waiting(),
                now=utc_now(),
            )
        ).where(queue_row.c.queue == bind("ch_queue"), queue_row.c.channel == WHOLE_QUEUE)

        def channels(part: int, walk: Any) -> sa.Select:
            row = c.alias(f"channel_row_{part}")
            group = c.alias(f"group_row_{part}")
            return (
                sa.select(
                    *self._part(
                        part,
                        n=walk.c.n,
                        channel=walk.c.channel,
                        **_limits_of(row),
                        entries=walk.c.entries,
                        due=self._channel_due(walk.c.channel),
                        # a channel's own circuit breaker: its state, whether it may
                        # let a probe through, and its cooldown's bounds
                        breaker=row.c.breaker_state,
                        reopened=sa.case((row.c.breaker_reopens_at <= utc_now(), 1), else_=0),
                        breaker_since=row.c.breaker_changed_at,
                        breaker_until=row.c.breaker_reopens_at,
                        # the control row of a channel's group (groups.py)
                        **_limits_of(group, "group_"),
                    )
                )
                .select_from(
                    walk.outerjoin(
                        row,
                        sa.and_(row.c.queue == bind("ch_queue"), row.c.channel == walk.c.channel),
                    ).outerjoin(
                        group,
                        sa.and_(
                            group.c.queue == bind("ch_queue"),
                            # '' for a channel in no group: the queue's row, not a group
                            group.c.channel == group_key(walk.c.channel),
                            group.c.channel != WHOLE_QUEUE,
                        ),
                    )
                )
                .where(walk.c.channel.isnot(None))
            )

        start = sa.func.coalesce(rotation, WHOLE_QUEUE)
        from_start = self._walk(
            "from_start", sa.literal(WHOLE_QUEUE, m.c.channel.type), start, streamed=streamed
        )
        if alone:
            return [channels(2, from_start)]
        after = self._walk("after_rotation", start, None, streamed=streamed)
        return [
            head,
            channels(1, after),
            *([channels(2, from_start)] if wrapped else []),
            self._busy(),
        ]

    def _build_read(
        self, *, wrapped: bool = True, alone: bool = False, streamed: bool = False
    ) -> Any:
        parts = self._read_parts(wrapped=wrapped, alone=alone, streamed=streamed)
        return parts[0] if len(parts) == 1 else sa.union_all(*parts)

    async def read_with(
        self, queue: str, limit: int, run: RunRead
    ) -> tuple[QueueRow | None, list[Candidate]]:
        """The read of a claim of up to `limit` messages, split (`split_read`): `run`
        runs one statement on the session's connection. Part 2 is left out while the
        queue's previous claim here did not need it, and read alone when this one
        turns out to."""
        parameters = self.read_parameters(queue, limit)
        wrapped = self._claims_wrap.get(queue, True)
        rows, streamed = await self._read_rows(queue, wrapped, parameters, run)
        head, candidates = split_read(rows)
        if head is None or head.paused:  # nothing is claimed: nothing to learn either
            return head, candidates
        head.streamed = streamed
        self._learn(queue, head)
        needed = wraps(candidates, limit, streamed=head.streamed)
        self._claims_wrap[queue] = needed
        if needed and not wrapped:
            more = await run("channel_read_from_start", self.read_from_start, parameters)
            candidates += [candidate(row) for row in sorted(more, key=lambda r: r["n"])]
        return head, candidates

    async def _read_rows(
        self, queue: str, wrapped: bool, parameters: dict[str, Any], run: RunRead
    ) -> tuple[Sequence[Any], bool]:
        """The read's rows, and whether its walks streamed (MariaDB's)."""
        statement = self.read if wrapped else self.read_after_rotation
        return await run(("channel_read", wrapped), statement, parameters), False

    def _learn(self, queue: str, head: QueueRow) -> None:
        """What a database keeps of a queue's read for its next one."""

    def read_parameters(self, queue: str, limit: int) -> dict[str, Any]:
        """The read's parameters for a claim of up to `limit` messages."""
        return {"ch_queue": queue, "most": limit + EXTRA_CANDIDATES}

    # -- the write ----------------------------------------------------------------------
    def _build_bump(self) -> sa.Update:
        """The queue row's version counted up, with the rotation and its rate window,
        if the version is still the one read."""
        c = self.tables.controls
        return (
            sa.update(c)
            .where(
                c.c.queue == bind("ch_queue"),
                c.c.channel == WHOLE_QUEUE,
                c.c.version == bind("seen_version", sa.BigInteger()),
            )
            .values(
                version=c.c.version + 1,
                rotation=bind("new_rotation", c.c.rotation.type),
                rate_slot=bind("queue_slot", sa.BigInteger()),
                rate_counts=bind("queue_counts", c.c.rate_counts.type),
            )
        )

    def _plain_branch(self) -> sa.Select:
        """PLAIN's oldest due messages' ids, up to :take_plain, as the plain claim takes
        them: highest priority first, one range of the claim index per priority
        (_claim.ready_ids), so no claim sorts the backlog."""
        tables, m = self.tables, self.tables.message
        due = self._plain_due_column()
        levels = [
            ready_ids(tables, priority_literal(level), m.c.priority, due).subquery(f"level_{level}")
            for level in PRIORITIES
        ]
        ranges = sa.union_all(*(level.select() for level in levels)).subquery("levels")
        return (
            sa.select(ranges.c.id)
            .order_by(ranges.c.priority.desc(), ranges.c[due.name], ranges.c.id)
            .limit(bind("take_plain", sa.Integer()))
        )

    def _plain_due_column(self) -> sa.Column[Any]:
        """The claim index's column that orders PLAIN's due messages."""
        return self.tables.message.c.next_attempt_at

    def _branch(self, i: int | None) -> sa.Select:
        """One member's oldest due messages' ids, up to :take_<i> (PLAIN for i None)."""
        if i is None:
            return self._plain_branch()
        m = self.tables.message
        return self._channel_branch(
            bind(f"member_{i}", m.c.channel.type), bind(f"take_{i}", sa.Integer())
        )

    def _channel_branch(self, channel: sa.ColumnElement[str], limit: Any) -> sa.Select:
        """`channel`'s oldest due messages' ids, up to `limit`, each the first of its
        ordering key."""
        tables, m = self.tables, self.tables.message
        return (
            sa.select(m.c.id)
            .where(
                m.c.queue == bind("ch_queue"),
                m.c.channel == channel,
                ready_predicate(m),
                m.c.channel.isnot(None),
                m.c.next_attempt_at <= bind("now", m.c.next_attempt_at.type),
                first_of_its_key(tables),
            )
            .order_by(m.c.next_attempt_at, m.c.id)
            .limit(limit)
        )

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
                acquired_at=bind("now", m.c.acquired_at.type),
            )
        )

    def take_shape(self, planned: Plan) -> TakeShape:
        """What the take of `planned` is made of: how many channels get a branch of
        their own, whether PLAIN gets one, and whether a join takes the channels the
        read saw whole (MariaDB's)."""
        channels, plain = planned.shape
        return channels, plain, False

    def statements(self, shape: TakeShape) -> Any:
        """The write's statement for a shape, built once (`_build_write`)."""
        found = self._by_shape.get(shape)
        if found is None:
            found = self._by_shape[shape] = self._build_write(shape)
        return found

    def _build_write(self, shape: TakeShape) -> Any:
        raise NotImplementedError

    def upsert_window(self) -> Any:
        """A channel's rate window written, its row inserted if missing."""
        raise NotImplementedError

    def _window_on_conflict(self, insert: Any) -> Any:
        """`upsert_window` as PostgreSQL and SQLite write it, from their own `insert`:
        INSERT ... ON CONFLICT (queue, channel) DO UPDATE."""
        c = self.tables.controls
        upsert = insert(c).values(**self._window_values())
        return upsert.on_conflict_do_update(
            index_elements=[c.c.queue, c.c.channel],
            set_={
                "rate_slot": upsert.excluded.rate_slot,
                "rate_counts": upsert.excluded.rate_counts,
            },
        )

    def insert_if_missing(self) -> Any:
        """An INSERT of a control row that does nothing where the row exists (another
        process may insert it at the same moment)."""
        raise NotImplementedError

    async def create_queue_row(self, engine: AsyncEngine, queue: str) -> None:
        """The queue's control row, which every channel claim's write counts up, in a
        transaction of its own (a claim that read no row creates it, then reads again)."""
        async with self.driver.own_transaction(engine) as conn:
            await conn.execute(
                self.insert_if_missing().values(
                    queue=queue, channel=WHOLE_QUEUE, updated_at=utc_now()
                )
            )

    async def write_limits(self, engine: AsyncEngine, change: LimitsWrite) -> bool:
        """`write_limits_in` in a channel transaction of its own."""
        async with self.driver.channel_transaction(engine) as conn:
            return await self.write_limits_in(conn, change)

    async def write_limits_in(self, conn: AsyncConnection, change: LimitsWrite) -> bool:
        """Write `change` to the control row of (queue, channel), creating the queue's
        row if missing, and count the queue row's version up (which also serialises
        changes of one queue); whether any setting changed. Only the values that differ
        are written, and a channel's row is created only to hold a setting. `conn` is
        a channel transaction (Driver.channel_transaction), which may hold other
        changes that must commit with this one."""
        c = self.tables.controls
        queue, channel = change.queue, change.channel
        this_row = (c.c.queue == queue, c.c.channel == channel)
        await conn.execute(
            self.insert_if_missing().values(queue=queue, channel=WHOLE_QUEUE, updated_at=utc_now())
        )
        await conn.execute(
            c.update()
            .where(c.c.queue == queue, c.c.channel == WHOLE_QUEUE)
            .values(version=c.c.version + 1)
        )
        if not change.wanted:
            return False
        # a locking read: MySQL's READ COMMITTED or not, it sees the latest version
        current = (
            await conn.execute(
                sa.select(*(c.c[name] for name in change.wanted)).where(*this_row).with_for_update()
            )
        ).first()
        changed = change.differing(None if current is None else dict(current._mapping))
        if not changed:
            return False
        if current is None:
            await conn.execute(
                self.insert_if_missing().values(queue=queue, channel=channel, updated_at=utc_now())
            )
        await conn.execute(c.update().where(*this_row).values(**changed, updated_at=utc_now()))
        return True

    def _window_values(self) -> dict[str, Any]:
        c = self.tables.controls
        return {
            "queue": bind("ch_queue"),
            "channel": bind("w_channel", c.c.channel.type),
            "updated_at": bind("now", c.c.updated_at.type),
            "rate_slot": bind("w_slot", sa.BigInteger()),
            "rate_counts": bind("w_counts", c.c.rate_counts.type),
        }

    def half_open_on_driver(
        self, statements: DriverStatements, dialect: SqlDialect
    ) -> tuple[DriverStatement, DriverStatement]:
        """`half_open` compiled for a driver's connection, every parameter given per
        call, kept in the driver's `statements`."""
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
        now = bind("now", c.c.breaker_changed_at.type)
        was = bind("p_from", c.c.breaker_state.type)
        opened = was == sa.literal_column(f"'{BreakerState.OPEN.value}'")
        half_open: sa.ColumnElement[str] = sa.literal_column(f"'{BreakerState.HALF_OPEN.value}'")
        mark = (
            c.update()
            .where(
                c.c.queue == bind("ch_queue"),
                c.c.channel == bind("p_channel", c.c.channel.type),
                c.c.breaker_state == was,
                c.c.breaker_reopens_at <= now,
            )
            .values(
                breaker_state=half_open,
                breaker_changed_at=sa.case((opened, now), else_=c.c.breaker_changed_at),
                breaker_reopens_at=bind("p_reopens", c.c.breaker_reopens_at.type),
            )
        )
        event = events.insert().values(
            queue=bind("ch_queue"),
            channel=bind("p_channel", events.c.channel.type),
            from_state=bind("p_from", events.c.from_state.type),
            to_state=half_open,
            reason=bind("p_reason", events.c.reason.type),
            at=bind("now", events.c.at.type),
        )
        return mark, event

    def write_parameters(self, queue: str, head: QueueRow, planned: Plan) -> dict[str, Any]:
        """The write's parameters: the version check, rotation and queue window, and
        each member's share (`_share_parameters`)."""
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
        self._share_parameters(parameters, [m for m in shares if m.name != PLAIN])
        return parameters

    def _share_parameters(self, parameters: dict[str, Any], channels: list[Member]) -> None:
        """A branch's parameters per channel with a share (`_branch`)."""
        for i, member in enumerate(channels):
            parameters[f"member_{i}"] = member.name
            parameters[f"take_{i}"] = member.share

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


__all__ = [
    "READ_COLUMNS",
    "ChannelClaim",
    "ChannelSession",
    "RunRead",
    "TakeShape",
    "as_claimed",
    "as_time",
    "bind",
    "candidate",
    "split_read",
]
