"""The channel claim: up to `limit` messages of one queue, within every limit, with
the queue's channels taking turns.

One transaction, holding the queue's control row (SELECT ... FOR UPDATE; SQLite's
writer lock), so the channel claims of a queue run one after another in every process
and what each counts is exact:

1. Lock the queue's row: its limits, its rate window, the rotation (the channel served
   last), and the database's time.
2. The next channels with ready messages after the rotation, one index descent each
   (a recursive query), wrapping round once; with each, its control row (limits, pause,
   rate window) and how many of its messages are in flight, plus the queue's total.
3. Share the claim among them in turns: one message each per turn, while the
   channel's room (max_concurrency minus in flight, and its rate allowance) and the
   queue's own room last.
4. Take each channel's oldest due messages, as many as its share, and mark them
   PROCESSING (PostgreSQL and SQLite: one UPDATE ... RETURNING; MySQL: a locking read,
   then the UPDATE).
5. Write back the rate windows and the rotation.

In flight counts PROCESSING rows, so nothing is kept in step with outcomes: a
settled, released or deferred message simply stops counting. Messages without a
channel take part in the rotation as one more member (no per-channel limits, the
queue's still).
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
    ready_predicate,
    state_literal,
)
from faststream_sqla.schema import (
    CHANNEL_READY,
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
#: the rotation's name for the messages without a channel: before every channel
PLAIN = ""


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
    paused: bool = False
    max_concurrency: int | None = None
    rate: Rate | None = None
    rate_slot: int | None = None
    rate_counts: str | None = None
    channel_max_concurrency: int | None = None
    channel_rate: Rate | None = None
    rotation: str | None = None
    #: messages without a channel wait, due (read as the lock was asked for)
    plain_waiting: bool = False
    now: datetime = field(default_factory=lambda: datetime(1970, 1, 1))


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


class ChannelClaim:
    """The statements of the channel claim for one set of tables, built once."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        tables: QueueTables = dialect.tables
        self.tables = tables
        self.mysql = tables.keys is not None
        m, c = tables.message, tables.controls
        self._lock = (
            sa.select(
                c.c.paused,
                c.c.max_concurrency,
                c.c.rate_count,
                c.c.rate_period,
                c.c.rate_slot,
                c.c.rate_counts,
                c.c.channel_max_concurrency,
                c.c.channel_rate_count,
                c.c.channel_rate_period,
                c.c.rotation,
                utc_now().label("now"),
                self._plain_waiting(),
            )
            .where(c.c.queue == sa.bindparam("ch_queue"), c.c.channel == WHOLE_QUEUE)
            .with_for_update()
        )
        # PROCESSING rows of the queue, through the index that holds them
        in_flight: list[sa.ColumnElement[bool]] = [
            m.c.queue == sa.bindparam("ch_queue"),
            m.c.state == state_literal(MessageState.PROCESSING),
        ]
        if self.mysql:
            in_flight[1:1] = [
                m.c.priority.in_([sa.literal_column(str(p)) for p in PRIORITIES]),
                m.c.ready_at == sa.literal(NOT_READY, m.c.ready_at.type),
            ]
        self._in_flight = (
            sa.select(m.c.channel, sa.func.count().label("n"))
            .where(*in_flight)
            .group_by(m.c.channel)
        )
        self._candidates = self._build_candidates()
        self._members = sa.select(
            c.c.channel,
            c.c.paused,
            c.c.max_concurrency,
            c.c.rate_count,
            c.c.rate_period,
            c.c.rate_slot,
            c.c.rate_counts,
        ).where(
            c.c.queue == sa.bindparam("ch_queue"),
            c.c.channel.in_(sa.bindparam("channels", expanding=True)),
        )

    # -- statements ---------------------------------------------------------------------
    def _plain_waiting(self) -> sa.Label[bool]:
        """Whether messages without a channel are due: the claim index's first due
        entry, per priority."""
        m = self.tables.message
        if self.mysql:
            due: list[sa.ColumnElement[bool]] = [
                m.c.priority.in_([sa.literal_column(str(p)) for p in PRIORITIES]),
                m.c.ready_at <= utc_now(),
            ]
        else:
            due = [ready_predicate(m), m.c.channel.is_(None), m.c.next_attempt_at <= utc_now()]
        return sa.exists().where(m.c.queue == sa.bindparam("ch_queue"), *due).label("plain_waiting")

    def _channel_source(self) -> sa.Table:
        """Where channels with live messages are found: MySQL's keys table (whose
        index holds every channelled message), else the message table's channel index
        (ready ones only)."""
        return self.tables.message if self.tables.keys is None else self.tables.keys

    def _ready_terms(self, alias: Any) -> list[sa.ColumnElement[bool]]:
        if self.tables.keys is not None:
            return []
        return [ready_predicate(alias), alias.c.channel.isnot(None)]

    def _build_candidates(self) -> sa.Select:
        """The channels after :after with live (PostgreSQL, SQLite: ready) messages,
        in order, at most :most: one index descent each."""
        source = self._channel_source()
        first_table = source.alias("first_channel")
        first = (
            sa.select(sa.func.min(first_table.c.channel))
            .where(
                first_table.c.queue == sa.bindparam("ch_queue"),
                first_table.c.channel > sa.bindparam("after"),
                *self._ready_terms(first_table),
            )
            .scalar_subquery()
        )
        cand = sa.select(first.label("channel"), sa.literal(1).label("n")).cte(
            "candidates", recursive=True
        )
        next_table = source.alias("next_channel")
        following = (
            sa.select(sa.func.min(next_table.c.channel))
            .where(
                next_table.c.queue == sa.bindparam("ch_queue"),
                next_table.c.channel > cand.c.channel,
                *self._ready_terms(next_table),
            )
            .scalar_subquery()
        )
        cand = cand.union_all(
            sa.select(following, cand.c.n + 1).where(
                cand.c.channel.isnot(None), cand.c.n < sa.bindparam("most")
            )
        )
        return sa.select(cand.c.channel).where(cand.c.channel.isnot(None)).order_by(cand.c.n)

    def _take(self, members: Sequence[Member], now: datetime) -> sa.Select:
        """Each member's oldest due messages, `share` of them, as one UNION ALL."""
        tables, m = self.tables, self.tables.message
        branches = []
        for i, member in enumerate(members):
            if member.share <= 0:
                continue
            limit: sa.ColumnElement[int] = sa.literal_column(str(int(member.share)))
            if member.name == PLAIN:
                due = m.c.ready_at if self.mysql else m.c.next_attempt_at
                eligible = [] if self.mysql else [ready_predicate(m)]
                select = (
                    sa.select(m.c.id)
                    .where(
                        m.c.queue == sa.bindparam("ch_queue"),
                        m.c.channel.is_(None),
                        *eligible,
                        due <= sa.bindparam("now", now, type_=m.c.next_attempt_at.type),
                        first_of_its_key(tables),
                    )
                    .order_by(m.c.priority.desc(), due, m.c.id)
                    .limit(limit)
                )
            elif tables.keys is not None:
                k = tables.keys
                select = (
                    sa.select(k.c.id)
                    .select_from(k.join(m, m.c.id == k.c.id))
                    .where(
                        k.c.queue == sa.bindparam("ch_queue"),
                        k.c.channel == sa.bindparam(f"channel_{i}", member.name),
                        m.c.ready_at == sa.literal(CHANNEL_READY, m.c.ready_at.type),
                        m.c.next_attempt_at
                        <= sa.bindparam("now", now, type_=m.c.next_attempt_at.type),
                        first_of_its_key(tables),
                    )
                    .order_by(k.c.id)
                    .limit(limit)
                    .prefix_with("STRAIGHT_JOIN")
                )
            else:
                select = (
                    sa.select(m.c.id)
                    .where(
                        m.c.queue == sa.bindparam("ch_queue"),
                        m.c.channel == sa.bindparam(f"channel_{i}", member.name),
                        ready_predicate(m),
                        m.c.channel.isnot(None),
                        m.c.next_attempt_at
                        <= sa.bindparam("now", now, type_=m.c.next_attempt_at.type),
                        first_of_its_key(tables),
                    )
                    .order_by(m.c.next_attempt_at, m.c.id)
                    .limit(limit)
                )
            branches.append(select.subquery(f"b{i}").select())
        if len(branches) == 1:
            return branches[0]
        return sa.union_all(*branches)  # type: ignore[return-value]

    def _mark(self, ids: Any, now: datetime) -> sa.Update:
        """PROCESSING for the messages `ids` (a list, or a SELECT of ids) that are
        still ready: the UPDATE reads each row's latest version, so one a plain claim
        took meanwhile is left alone."""
        m = self.tables.message
        return (
            sa.update(m)
            .where(m.c.id.in_(ids), ready_predicate(m))
            .values(
                state=MessageState.PROCESSING,
                deliveries_count=m.c.deliveries_count + 1,
                claims_count=m.c.claims_count + 1,
                acquired_at=now,
            )
        )

    # -- the claim ----------------------------------------------------------------------
    async def _queue_row(self, conn: AsyncConnection, queue: str) -> QueueRow | None:
        row = (await conn.execute(self._lock, {"ch_queue": queue})).first()
        if row is None:
            return None
        now = row.now if isinstance(row.now, datetime) else datetime.fromisoformat(row.now)
        return QueueRow(
            paused=bool(row.paused),
            max_concurrency=row.max_concurrency,
            rate=_rate(row.rate_count, row.rate_period),
            rate_slot=row.rate_slot,
            rate_counts=row.rate_counts,
            channel_max_concurrency=row.channel_max_concurrency,
            channel_rate=_rate(row.channel_rate_count, row.channel_rate_period),
            rotation=row.rotation,
            plain_waiting=bool(row.plain_waiting),
            now=now,
        )

    async def _candidates_after(
        self, conn: AsyncConnection, queue: str, after: str, most: int
    ) -> list[str]:
        result = await conn.execute(
            self._candidates, {"ch_queue": queue, "after": after, "most": most}
        )
        return list(result.scalars())

    async def claim(self, conn: AsyncConnection, queue: str, limit: int) -> list[Sequence[Any]]:
        """Claim on `conn`, a transaction of the broker's own (see the module)."""
        head = await self._queue_row(conn, queue)
        if head is None:
            await self._create_queue_row(conn, queue)
            head = await self._queue_row(conn, queue)
            assert head is not None
        if head.paused or limit <= 0:
            return []
        now_seconds = head.now.replace(tzinfo=timezone.utc).timestamp()
        counts = {
            row.channel: row.n for row in await conn.execute(self._in_flight, {"ch_queue": queue})
        }
        total_in_flight = sum(counts.values())
        queue_room: int | None = None
        if head.max_concurrency is not None:
            queue_room = max(0, head.max_concurrency - total_in_flight)
        queue_window = None
        if head.rate is not None:
            queue_window = window.window_at(
                head.rate_slot, head.rate_counts, head.rate, now_seconds
            )
            allowed = window.allowance(queue_window, head.rate)
            queue_room = allowed if queue_room is None else min(queue_room, allowed)
        if queue_room == 0:
            return []
        most = limit + EXTRA_CANDIDATES
        # The round goes on after the channel served last, reaches the messages
        # without a channel at its end, and starts again at the first channel.
        rotation = head.rotation or PLAIN
        after = await self._candidates_after(conn, queue, rotation, most)
        wrapped: list[str] = []
        if len(after) < most and rotation != PLAIN:
            wrapped = [
                n
                for n in await self._candidates_after(conn, queue, PLAIN, most - len(after))
                if n <= rotation
            ]
        plain = Member(PLAIN, paused=not head.plain_waiting)
        members = [*map(Member, after), plain, *map(Member, wrapped)]
        await self._read_members(conn, queue, members, head)
        for member in members:
            member.in_flight = counts.get(None if member.name == PLAIN else member.name, 0)
        given = share_out(members, limit, queue_room, now_seconds)
        if given == 0:
            await self._rotate(conn, queue, head, members, queue_window, None)
            return []
        rows = await self._take_and_mark(conn, queue, members, head.now)
        taken: dict[str, int] = {}
        for row in rows:
            name = row[_CHANNEL] if row[_CHANNEL] is not None else PLAIN
            taken[name] = taken.get(name, 0) + 1
        for member in members:
            member.share = taken.get(member.name, 0)
        if queue_window is not None:
            queue_window = window.taken(queue_window, len(rows))
        last_served = None
        for member in members:
            if member.share:
                last_served = member.name
        await self._rotate(conn, queue, head, members, queue_window, last_served)
        return rows

    async def _read_members(
        self, conn: AsyncConnection, queue: str, members: list[Member], head: QueueRow
    ) -> None:
        named = [m.name for m in members if m.name != PLAIN]
        stored = {}
        if named:
            result = await conn.execute(self._members, {"ch_queue": queue, "channels": named})
            stored = {row.channel: row for row in result}
        for member in members:
            if member.name == PLAIN:
                continue
            row = stored.get(member.name)
            member.max_concurrency = head.channel_max_concurrency
            member.rate = head.channel_rate
            if row is None:
                continue
            member.stored, member.paused = True, bool(row.paused)
            if row.max_concurrency is not None:
                member.max_concurrency = row.max_concurrency
            own_rate = _rate(row.rate_count, row.rate_period)
            if own_rate is not None:
                member.rate = own_rate
            member.rate_slot, member.rate_counts = row.rate_slot, row.rate_counts

    async def _take_and_mark(
        self, conn: AsyncConnection, queue: str, members: Sequence[Member], now: datetime
    ) -> list[Sequence[Any]]:
        m = self.tables.message
        take = self._take(members, now)
        columns = claimed_columns(m, headers_as_text=not self.mysql)
        if not self.mysql:
            marked = self._mark(take.scalar_subquery(), now).returning(*columns)
            return [tuple(row) for row in await conn.execute(marked, {"ch_queue": queue})]
        # MySQL: no UPDATE ... RETURNING. The ids are read without locks (a locking
        # read of the keys index would wait for publishers' uncommitted rows), then
        # marked, then read back: under the queue's lock no other channel claim runs,
        # and what the UPDATE took is ours (acquired_at is this claim's time).
        ids = list((await conn.execute(take, {"ch_queue": queue})).scalars())
        if not ids:
            return []
        await conn.execute(self._mark(ids, now))
        rows = await conn.execute(
            sa.select(*columns).where(
                m.c.id.in_(ids),
                m.c.state == state_literal(MessageState.PROCESSING),
                m.c.acquired_at == sa.bindparam("now", now, type_=m.c.acquired_at.type),
            )
        )
        return [tuple(row) for row in rows]

    async def _rotate(
        self,
        conn: AsyncConnection,
        queue: str,
        head: QueueRow,
        members: Sequence[Member],
        queue_window: window.Window | None,
        last_served: str | None,
    ) -> None:
        c = self.tables.controls
        values: dict[str, Any] = {}
        if last_served is not None and last_served != head.rotation:
            values["rotation"] = last_served
        if queue_window is not None and head.rate is not None:
            values["rate_slot"], values["rate_counts"] = queue_window.slot, queue_window.encode()
        if values:
            await conn.execute(
                c.update().where(c.c.queue == queue, c.c.channel == WHOLE_QUEUE).values(**values)
            )
        for member in members:
            if member.rate is None or member.window is None or not member.share:
                continue
            after = window.taken(member.window, member.share)
            state = {"rate_slot": after.slot, "rate_counts": after.encode()}
            if member.stored:
                await conn.execute(
                    c.update().where(c.c.queue == queue, c.c.channel == member.name).values(**state)
                )
            else:
                await conn.execute(
                    self.insert_if_missing().values(
                        queue=queue, channel=member.name, updated_at=head.now, **state
                    )
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

    async def _create_queue_row(self, conn: AsyncConnection, queue: str) -> None:
        await conn.execute(
            self.insert_if_missing().values(queue=queue, channel=WHOLE_QUEUE, updated_at=utc_now())
        )


def _claimed_position(name: str) -> int:
    from faststream_sqla.schema import CLAIMED_COLUMNS

    return CLAIMED_COLUMNS.index(name)


_CHANNEL = _claimed_position("channel")


async def claim_channelled(
    dialect: Dialect, engine: AsyncEngine, queue: str, limit: int
) -> list[Sequence[Any]]:
    """Up to `limit` messages of `queue` within its limits and its channels' (see the
    module), as claimed rows in `schema.CLAIMED_COLUMNS` order."""
    claim = dialect.channel_claim
    async with dialect.channel_transaction(engine) as conn:
        return await claim.claim(conn, queue, limit)


__all__ = ["ChannelClaim", "Member", "claim_channelled", "share_out"]
