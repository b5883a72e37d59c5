"""MySQL's and MariaDB's channel claim, in one transaction on the pool's asyncmy
connection at the server's own isolation.

- The read walks the channels through one range of the keys table's channel index
  (`_walk`), not a recursive query: MariaDB evaluates a recursive step's correlated
  bound as a walk of the queue's whole key range. On MariaDB the range is streamed
  under `LIMIT ROWS EXAMINED` (`_read_rows`).
- The take reads the ids of each channel's oldest due messages: a branch per channel
  (`STRAIGHT_JOIN`, `FORCE INDEX`), and one `JSON_TABLE` join for the channels the read
  saw whole (`_whole_channels`). A channel whose share is the one message the read
  already found needs no take (`known_ids`).
- The write is one packet: an UPDATE that checks and counts up the queue row's
  version and marks the messages still ready, the read-back of what it marked, and
  the COMMIT (`write`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Hashable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects.mysql import insert as mysql_insert

from faststream_sqla.channels.plan import PLAIN, SCAN_PER_CANDIDATE, ProbeMissed
from faststream_sqla.clock import utc_now
from faststream_sqla.schema import (
    CHANNEL_READY,
    CLAIM_COUNTERS,
    CLAIMED_COLUMNS,
    MAX_KEY_LENGTH,
    NOT_READY,
    PRIORITIES,
    TOKEN_COLUMN,
)

from .._claim import claimed_columns, first_of_its_key
from ..channel_claim import ChannelClaim, RunRead, TakeShape, as_claimed, bind

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from faststream_sqla.channels.plan import Candidate, Member, Plan, QueueRow
    from faststream_sqla.message import ClaimedMessage

    from .._compiled import DriverStatement
    from ._asyncmy import DriverTransaction
    from .driver import MySQLDriver

#: MariaDB: rows a streamed read may examine per keys-index entry its bounded walk
#: would read, and per message in flight, before the server cuts it short
EXAMINED_PER_SCANNED = 10
EXAMINED_PER_IN_FLIGHT = 10
#: MariaDB: reads of a queue made with the bounded walk after a streamed read was cut
#: short (a channel with a long backlog in its range), doubled for each cut in a row
#: up to BOUNDED_AFTER_CUTS times as many
BOUNDED_AFTER_CUT = 64
BOUNDED_AFTER_CUTS = 64
#: the part of a streamed read's last row: a read without it was cut short
COMPLETE = 4

_TOKEN = CLAIMED_COLUMNS.index(TOKEN_COLUMN)

#: the queue row's version checked and counted up, with the rotation and the queue's
#: rate window, in the order _bump_sql and _mark_and_bump_sql take them
_BUMP_SET = "version = {c}version + 1, {c}rotation = %s, {c}rate_slot = %s, {c}rate_counts = %s"
_BUMP_WHERE = "{c}queue = %s AND {c}channel = '' AND {c}version = %s"


@functools.lru_cache(maxsize=8)
def _bump_sql(controls: str) -> str:
    return f"UPDATE {controls} SET {_BUMP_SET.format(c='')} WHERE {_BUMP_WHERE.format(c='')}"


@functools.lru_cache(maxsize=256)
def _mark_and_bump_sql(controls: str, message: str, known: int, taken: int) -> str:
    """The channel claim's messages marked PROCESSING and the queue row's version bump,
    as one UPDATE: it matches nothing once the version moved. The queue row is read
    first (its primary key), so concurrent claims queue on it.

    A message is marked only if it is still ready and due, and a taken one only if its
    claim token is still as the take read it: one without a channel may have been
    claimed by a plain claim and put back meanwhile. The `known` ones, which the read
    found, are channels' messages: only a channel claim, which would have moved the
    version, can take those."""
    counters = ", ".join(f"m.{name} = m.{name} + 1" for name in CLAIM_COUNTERS)
    which = []
    if known:
        which.append(f"m.id IN ({', '.join(['%s'] * known)})")
    if taken:
        which.append(f"(m.id, m.{TOKEN_COLUMN}) IN ({', '.join(['(%s, %s)'] * taken)})")
    return (
        f"UPDATE {controls} AS c STRAIGHT_JOIN {message} AS m FORCE INDEX (PRIMARY) "
        f"ON ({' OR '.join(which)}) "
        "AND m.state IN ('PENDING', 'RETRYABLE') AND m.next_attempt_at <= UTC_TIMESTAMP(6) "
        f"SET m.state = 'PROCESSING', {counters}, m.acquired_at = %s, "
        f"c.{_BUMP_SET.format(c='c.')} WHERE {_BUMP_WHERE.format(c='c.')}"
    )


@functools.lru_cache(maxsize=256)
def _read_marked_sql(message: str, rows: int) -> str:
    """The claimed rows of the listed ids that this claim marked (its acquired_at)."""
    return (
        f"SELECT {', '.join(CLAIMED_COLUMNS)} FROM {message} "
        f"WHERE id IN ({', '.join(['%s'] * rows)}) AND state = 'PROCESSING' "
        "AND acquired_at = %s"
    )


def mappings(cursor: Any, rows: Sequence[Sequence[Any]] | None) -> list[dict[str, Any]]:
    """A driver cursor's rows as mappings of its column names."""
    names = [column[0] for column in cursor.description or ()]
    return [dict(zip(names, row, strict=True)) for row in rows or ()]


class MySQLChannelClaim(ChannelClaim):
    driver: MySQLDriver

    def __init__(self, driver: MySQLDriver) -> None:
        super().__init__(driver)
        #: MariaDB's reads with streamed walks (`_walk`), by `wrapped`
        self.streamed_reads = {
            wrapped: self._build_read(wrapped=wrapped, streamed=True) for wrapped in (True, False)
        }
        #: MariaDB, per queue: reads left to make bounded since a streamed one was cut,
        #: and how many were cut in a row
        self._bounded_reads: dict[str, int] = {}
        self._cuts: dict[str, int] = {}
        #: per queue: the messages in flight its last read counted (a streamed read's
        #: allowance of rows to examine grows with them)
        self._in_flight_seen: dict[str, int] = {}

    @asynccontextmanager
    async def session(self, engine: AsyncEngine) -> AsyncIterator[MySQLChannelSession]:
        # On the driver's connection, in one transaction at the server's own isolation:
        # the read (its snapshot starts there), the take if a share is larger than the
        # message the read found (a plain read of that snapshot), then one packet: the
        # UPDATE that checks and counts up the queue row's version and marks the
        # messages that are still ready, the read-back of what it marked, and the
        # COMMIT. Two round trips for most claims; a read made ahead of its write
        # keeps the transaction open in between, which holds no lock.
        async with self.driver._transaction(engine, read_committed=False) as transaction:
            yield MySQLChannelSession(self, engine, transaction)

    @functools.cached_property
    def _joins_whole(self) -> bool:
        """JSON_TABLE is there (known once the driver has met its server)."""
        return bool(getattr(self.driver, "json_table", False))

    @functools.cached_property
    def _streams(self) -> bool:
        """MariaDB: reads walk the channels streamed, bounded by `LIMIT ROWS EXAMINED`
        (known once the driver has met its server)."""
        return bool(getattr(self.driver, "limits_rows_examined", False))

    # -- the read -----------------------------------------------------------------------
    def _priorities(self) -> sa.ColumnElement[bool]:
        """Every priority: the claim index's ranges lead with it."""
        m = self.tables.message
        return m.c.priority.in_([sa.literal_column(str(p)) for p in PRIORITIES])

    def _in_flight(self) -> list[sa.ColumnElement[bool]]:
        m = self.tables.message
        queue, processing = super()._in_flight()
        return [
            queue,
            self._priorities(),
            m.c.ready_at == sa.literal(NOT_READY, m.c.ready_at.type),
            processing,
        ]

    def _plain_waiting(self) -> sa.ColumnElement[bool]:
        m = self.tables.message
        return sa.exists().where(
            m.c.queue == bind("ch_queue"), self._priorities(), m.c.ready_at <= utc_now()
        )

    def _due_entries(self, channel: sa.ColumnElement[str], now: Any) -> sa.Select:
        """`channel`'s due messages that lead their ordering key, in id order, through
        the keys index: in-flight and not yet due ones are passed over."""
        tables, m = self.tables, self.tables.message
        k = tables.keys
        assert k is not None
        return (
            sa.select(k.c.id)
            .select_from(k.join(m, m.c.id == k.c.id))
            .where(
                k.c.queue == bind("ch_queue"),
                k.c.channel == channel,
                m.c.ready_at == sa.literal(CHANNEL_READY, m.c.ready_at.type),
                m.c.next_attempt_at <= now,
                first_of_its_key(tables),
            )
            .order_by(k.c.id)
        )

    def _channel_due(self, channel: sa.ColumnElement[str]) -> sa.ColumnElement[Any]:
        """The id of the first message of `channel` the take would take (NULL: none
        due; one all in flight too), which spares the take for a channel whose share
        is one message (`known_ids`). Stops at the first due one; a channel whose
        entries are all delayed or in flight is read whole."""
        return self._due_entries(channel, utc_now()).limit(1).scalar_subquery()

    def _walk(
        self,
        name: str,
        start: sa.ColumnElement[str],
        stop: sa.ColumnElement[str] | None,
        *,
        streamed: bool = False,
    ) -> Any:
        """The channels from one range of the keys index after `start`, read no
        further than :scan entries; `entries` counts what was read of each, so the plan
        can tell a range cut short (the rotation then stops at its end) from the end of
        the queue.

        `streamed`: the range grouped as the index yields it, up to :most channels, with
        no bound on the entries read. It saves the bounded walk's two temporary tables
        (the range copied, then grouped), but reads every entry of a channel with a long
        backlog: the whole read is made with the server's own bound on the rows it
        examines (`_read_rows`)."""
        k = self.tables.keys
        assert k is not None
        bounds = [k.c.queue == bind("ch_queue"), k.c.channel > start]
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
                .limit(bind("scan", sa.Integer()))
                .subquery(f"{name}_head")
            )
            channel = head.c.channel
            ranged = sa.select(channel)
        distinct = (
            ranged.add_columns(sa.func.count().label("entries"))
            .group_by(channel)
            .order_by(channel)
            .limit(bind("most", sa.Integer()))
            .subquery(f"{name}_channels")
        )
        # numbered in order, as the recursive walk numbers them
        return sa.select(
            distinct.c.channel,
            sa.func.row_number().over(order_by=distinct.c.channel).label("n"),
            distinct.c.entries,
        ).subquery(name)

    def _busy(self) -> sa.Select:
        # While a drain's settled messages wait for InnoDB's purge, their entries still
        # fill the in-flight range and swell its estimate: left to itself MariaDB then
        # counted by scanning the queue's entries or the whole table.
        m = self.tables.message
        return super()._busy().with_hint(m, f"FORCE INDEX (ix_{m.name}_ready)")

    def _read_parts(self, *, wrapped: bool, alone: bool, streamed: bool) -> list[sa.Select]:
        """`streamed`: the walks stream (`_walk`), and the read ends with part 4, one
        constant row, and `LIMIT ROWS EXAMINED :examined`: the server stops a read that
        examines more and returns what it has so far, which then lacks part 4. A
        `DO 0` after it keeps the driver from asking for the warning that the cut
        leaves, and from logging it."""
        parts = super()._read_parts(wrapped=wrapped, alone=alone, streamed=streamed)
        if streamed:
            parts.append(
                sa.select(*self._part(COMPLETE)).suffix_with(
                    sa.text("LIMIT ROWS EXAMINED :examined; DO 0")
                )
            )
        return parts

    async def _read_rows(
        self, queue: str, wrapped: bool, parameters: dict[str, Any], run: RunRead
    ) -> tuple[Sequence[Any], bool]:
        """On MariaDB the walks are streamed, unless a recent streamed read of the
        queue was cut short (`_read_streamed`)."""
        if self._streams and self._bounded_reads.get(queue, 0) <= 0:
            rows = await self._read_streamed(queue, wrapped, parameters, run)
            if rows is not None:
                return rows, True
        if queue in self._bounded_reads:
            self._bounded_reads[queue] -= 1
        return await super()._read_rows(queue, wrapped, parameters, run)

    async def _read_streamed(
        self, queue: str, wrapped: bool, parameters: dict[str, Any], run: RunRead
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
        if any(row["part"] == COMPLETE for row in rows):
            self._cuts.pop(queue, None)
            return rows
        cuts = self._cuts[queue] = self._cuts.get(queue, 0) + 1
        self._bounded_reads[queue] = BOUNDED_AFTER_CUT * min(2 ** (cuts - 1), BOUNDED_AFTER_CUTS)
        return None

    def _learn(self, queue: str, head: QueueRow) -> None:
        self._in_flight_seen[queue] = head.in_flight

    def read_parameters(self, queue: str, limit: int) -> dict[str, Any]:
        parameters = super().read_parameters(queue, limit)
        parameters["scan"] = parameters["most"] * SCAN_PER_CANDIDATE
        return parameters

    # -- the write ----------------------------------------------------------------------
    def _plain_due_column(self) -> sa.Column[Any]:
        return self.tables.message.c.ready_at

    def _channel_branch(self, channel: sa.ColumnElement[str], limit: Any) -> sa.Select:
        m, k = self.tables.message, self.tables.keys
        assert k is not None
        now = bind("now", m.c.next_attempt_at.type)
        return (
            self._due_entries(channel, now)
            .limit(limit)
            .prefix_with("STRAIGHT_JOIN")
            # left to itself MariaDB walked the keys table by id for the ORDER BY
            .with_hint(k, f"FORCE INDEX (ix_{m.name}_channel)")
        )

    def _build_write(self, shape: TakeShape) -> Any:
        """The take's ids (a derived table of integers), joined to their rows."""
        m = self.tables.message
        taken = self._take(shape).subquery("taken")
        return (
            sa.select(*claimed_columns(m))
            .select_from(taken.join(m, m.c.id == taken.c.id))
            .prefix_with("STRAIGHT_JOIN")
        )

    def _take(self, shape: TakeShape) -> sa.Select:
        """The branches of `shape`'s channels and PLAIN's, and its join of whole
        channels, as one UNION ALL: (SELECT ... LIMIT n) UNION ALL (...), no derived
        table per branch."""
        channels, plain, joined = shape
        wanted: list[int | None] = [*range(channels), *([None] if plain else [])]
        branches = [self._branch(i) for i in wanted]
        if joined:
            branches.append(self._whole_channels().subquery("whole").select())
        if len(branches) == 1:
            return branches[0]
        return sa.union_all(*branches)  # type: ignore[return-value]

    def _whole_channels(self) -> sa.Select:
        """The oldest due messages' ids of the channels the read saw whole, each up to
        its share, in one statement whose text does not depend on how many
        (:ch_shares, a JSON array of [channel, share]): MariaDB has no LATERAL, so the
        channels' messages are numbered by a window over all of their live entries,
        which the read bounded. A branch per channel cost the server a parse and a
        plan each."""
        tables, m = self.tables, self.tables.message
        k = tables.keys
        assert k is not None
        collation = getattr(self.driver, "key_collation", "utf8mb4_bin")
        shares = (
            sa.func.json_table(
                bind("ch_shares"),
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
                    sa.and_(k.c.queue == bind("ch_queue"), k.c.channel == shares.c.channel),
                ).join(m, m.c.id == k.c.id)
            )
            .where(
                m.c.ready_at == sa.literal(CHANNEL_READY, m.c.ready_at.type),
                m.c.next_attempt_at <= bind("now", m.c.next_attempt_at.type),
                first_of_its_key(tables),
            )
            .prefix_with("STRAIGHT_JOIN")
            .with_hint(k, f"FORCE INDEX (ix_{m.name}_channel)")
            .subquery("numbered")
        )
        return sa.select(numbered.c.id).where(numbered.c.place <= numbered.c.share)

    def take_shape(self, planned: Plan) -> TakeShape:
        channels, plain = planned.shape
        if not self._joins_whole:
            return channels, plain, False
        taken = [m for m in planned.members if self._taken(m)]
        cut = sum(1 for m in taken if not m.whole)
        return cut, plain, cut < len(taken)

    def known_ids(self, planned: Plan) -> list[int]:
        """The messages of the channels whose share is the one message the read already
        found (their first due one): no take needed for those."""
        return [m.due for m in planned.members if self._known(m)]

    def _known(self, member: Member) -> bool:
        return self._joins_whole and member.share == 1 and member.name != PLAIN

    def _taken(self, member: Member) -> bool:
        """A channel with a share the take must find."""
        return member.share > 0 and member.name != PLAIN and not self._known(member)

    def _share_parameters(self, parameters: dict[str, Any], channels: list[Member]) -> None:
        if self._joins_whole:
            channels = [m for m in channels if self._taken(m)]
            whole = [[m.name, m.share] for m in channels if m.whole]
            if whole:
                parameters["ch_shares"] = json.dumps(whole)
            channels = [m for m in channels if not m.whole]
        super()._share_parameters(parameters, channels)

    def upsert_window(self) -> Any:
        upsert = mysql_insert(self.tables.controls).values(**self._window_values())
        return upsert.on_duplicate_key_update(
            rate_slot=upsert.inserted.rate_slot, rate_counts=upsert.inserted.rate_counts
        )

    def insert_if_missing(self) -> Any:
        # Not INSERT IGNORE: its skipped row is a server warning, which asyncmy fetches
        # with one more round trip and logs (on stderr in a plain script). Setting the
        # key to itself changes nothing and warns of nothing.
        c = self.tables.controls
        return mysql_insert(c).on_duplicate_key_update(queue=c.c.queue)

    async def write(
        self,
        engine: AsyncEngine,
        transaction: DriverTransaction,
        queue: str,
        head: QueueRow,
        planned: Plan,
    ) -> list[Sequence[Any]] | None:
        """The write in the read's transaction; None if the queue row's version moved
        since the read (another claim wrote first)."""
        driver, cursor = self.driver, transaction.cursor
        parameters = self.write_parameters(queue, head, planned)
        # the channels whose one message the read found; the others' are taken
        known = self.known_ids(planned)
        shape = self.take_shape(planned)
        taken: list[Sequence[Any]] = []
        if shape != (0, False, False):
            take = self._compiled_take(engine, shape, parameters)
            await cursor.execute(take.sql, take.arguments(parameters))
            taken = list(await cursor.fetchall() or ())
        bump_values = (
            parameters["new_rotation"],
            parameters["queue_slot"],
            parameters["queue_counts"],
            queue,
            parameters["seen_version"],
        )
        if not known and not taken:
            bump = _bump_sql(driver._q(engine, self.tables.controls))
            if not await cursor.execute(bump, bump_values):
                return None
            await self._write_windows_and_probes(engine, cursor, queue, head, planned)
            return []
        message = driver._q(engine, self.tables.message)
        as_read = [value for row in taken for value in (row[0], row[_TOKEN])]
        mark = _mark_and_bump_sql(
            driver._q(engine, self.tables.controls), message, len(known), len(taken)
        )
        mark_values = (*known, *as_read, head.now, *bump_values)
        ids = [*known, *(row[0] for row in taken)]
        read_back = _read_marked_sql(message, len(ids))
        rows: list[Sequence[Any]] | None = None
        if planned.windows or planned.probes:  # rare: a statement each, then the commit
            marked = await cursor.execute(mark, mark_values)
            if not marked:
                return None
            await self._write_windows_and_probes(engine, cursor, queue, head, planned)
        elif known:
            marked = await cursor.execute(
                f"{mark}; {read_back}; COMMIT", (*mark_values, *ids, head.now)
            )
            await cursor.nextset()
            rows = list(await cursor.fetchall() or ())
            await cursor.nextset()
            transaction.ended = True
        else:
            marked = await cursor.execute(f"{mark}; COMMIT", mark_values)
            await cursor.nextset()
            transaction.ended = True
        # matched rows, the queue row's among them: none when the version moved (or
        # when none of the messages is still as read: read again all the same)
        if not marked:
            return None
        if rows is not None:
            return rows
        if not known and marked == len(taken) + 1:
            return [as_claimed(row, head.now) for row in taken]
        # the rows this claim marked, if a plain claim took some of the taken ones
        # meanwhile (after the packet's COMMIT: in a transaction of their own)
        await cursor.execute(read_back, (*ids, head.now))
        transaction.ended = False
        return list(await cursor.fetchall() or ())

    def _compiled_take(
        self, engine: AsyncEngine, shape: TakeShape, parameters: dict[str, Any]
    ) -> DriverStatement:
        """The take of a shape, compiled on its first use; a claim of that shape gives
        it the same parameters every time (those of its channels and of PLAIN)."""
        on_driver = self.driver._on_driver
        take = on_driver.get(("channel_take", shape))
        if take is None:
            statement = self.statements(shape)
            compiled = statement.compile(dialect=engine.dialect)
            given = [name for name in compiled.params if name in parameters]
            take = on_driver.add(("channel_take", shape), engine.dialect, statement, given)
        return take

    async def _write_windows_and_probes(
        self, engine: AsyncEngine, cursor: Any, queue: str, head: QueueRow, planned: Plan
    ) -> None:
        """The channels' rate windows, and the HALF_OPEN marks of the breakers this claim
        probes (ProbeMissed if one changed since the read): rare, so one statement
        each."""
        on_driver = self.driver._on_driver
        windows = self.window_parameters(queue, head.now, planned)
        if windows:
            upsert = on_driver.get(
                "channel_window", engine.dialect, self.upsert_window, tuple(windows[0])
            )
            for window in windows:
                await cursor.execute(upsert.sql, upsert.arguments(window))
        probes = self.probe_parameters(queue, head.now, planned)
        if probes:
            mark, event = self.half_open_on_driver(on_driver, engine.dialect)
            for probe in probes:
                if await cursor.execute(mark.sql, mark.arguments(probe)) != 1:
                    raise ProbeMissed(probe["p_channel"])
                await cursor.execute(event.sql, event.arguments(probe))


class MySQLChannelSession:
    """The channel claim's read and write in one transaction on an asyncmy connection."""

    def __init__(
        self, claim: MySQLChannelClaim, engine: AsyncEngine, transaction: DriverTransaction
    ) -> None:
        self.claim, self.engine, self.transaction = claim, engine, transaction

    async def read(self, queue: str, limit: int) -> tuple[QueueRow | None, list[Candidate]]:
        on_driver, engine = self.claim.driver._on_driver, self.engine
        cursor = self.transaction.cursor

        async def run(name: Hashable, statement: Any, parameters: dict[str, Any]) -> Any:
            read = on_driver.of(name, engine.dialect, statement, tuple(parameters))
            await cursor.execute(read.sql, read.arguments(parameters))
            rows = mappings(cursor, await cursor.fetchall())
            await cursor.nextset()  # a streamed read's DO 0
            return rows

        # every read in the snapshot the first one starts
        return await self.claim.read_with(queue, limit, run)

    async def write(self, queue: str, head: QueueRow, planned: Plan) -> list[ClaimedMessage] | None:
        rows = await self.claim.write(self.engine, self.transaction, queue, head, planned)
        return None if rows is None else self.claim.driver.read_claimed(rows)
