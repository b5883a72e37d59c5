"""SQLite (the embedded default): WAL, immediate write transactions, UPDATE ... RETURNING.

SQLite has one writer, so the broker's own writes queue on one `asyncio.Lock` and each
runs its whole `BEGIN IMMEDIATE` transaction as one call on aiosqlite's thread
(`in_driver_thread`, `_gil`):

- the claim: one probe per priority, highest first, until it has its ids; the rows
  read as one JSON document (a plain message's option columns as one NULL), then the
  `UPDATE` to PROCESSING with the time that read returned;
- the outcome write: multi-row `VALUES` lists joined to the messages by key for the
  archive copy and the delete, an `executemany` for requeues;
- the insert: multi-row `INSERT`s of up to 4,096 rows, in power-of-two sizes; lease
  renewal over `json_each`;
- the channel claim's session, read and write under the writer lock.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import sqlite3
import time
import traceback
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.clock import utc_now
from faststream_sqla.message import ClaimedMessage
from faststream_sqla.schema import (
    CLAIM_COUNTERS,
    CLAIMED_COLUMNS,
    PRIORITIES,
    Initial,
    QueueTables,
    Timestamp,
    archive_copy,
)

from .._claim import queues_with_due_messages, ready_ids
from .._compiled import DriverStatements
from .._gil import short_switch_interval
from .._pool import check_in
from ..base import (
    READS_ONLY,
    SHARED_CLAIM_COLUMNS,
    TERMINAL,
    TOKEN_COLUMN,
    Driver,
    InsertShape,
    NewMessage,
    Outcome,
    WakeupHooks,
    insert_shape,
    leases_document,
    sort_in_claim_order,
    timestamp_text,
)
from ..catalogue import load_catalogue
from ..claimed_rows import stored_headers
from ._aiosqlite import run_in_thread, runs_calls_in_thread
from .channel_claim import SQLiteChannelClaim
from .watcher import SQLiteWatcher

T = TypeVar("T")
(READS_ONLY_OPTION,) = READS_ONLY

_QUERIES = load_catalogue("faststream_sqla.drivers.sqlite")
# a write transaction on the cursor itself: fetched once, not per transaction
_BEGIN_WRITE, _COMMIT, _ROLLBACK = map(
    _QUERIES.without_tables, ("begin_write", "commit", "rollback")
)

# created_at and the due time are computed here (see _insert_work), the rest is literal
# SQLite's limit on bound variables per statement: 999 before 3.32, 32766 since.
_MAX_VARIABLES = 32766 if sqlite3.sqlite_version_info >= (3, 32) else 999
_ARCHIVE_PARAMS = 7  # bound values per archived outcome
#: rows per archive statement at most (chunks rounds it down to a power of two)
_MAX_ARCHIVE_ROWS = min(1024, _MAX_VARIABLES // _ARCHIVE_PARAMS)


def chunks(rows: int, most: int) -> list[tuple[int, int]]:
    """`rows` split into statements, as (first row, rows) pairs: of the largest power of
    two up to `most` rows, then of the powers of two of what remains, largest first:
    1000 rows at most 1024 are 512 + 256 + 128 + 64 + 32 + 8.

    A multi-row statement's text depends on its row count, and SQLite prepares each text
    anew, at a cost that grows with its rows and that a batch's execution does not
    repay: with a statement per size, nearly every flush of a drain (whose sizes follow
    the handler's pace) prepared its own. Powers of two bound the texts to a few per
    table, which stay prepared in each connection's statement cache."""
    full = 1 << (most.bit_length() - 1)
    sizes = [full] * (rows // full)
    rest = rows % full
    while rest:
        size = 1 << (rest.bit_length() - 1)
        sizes.append(size)
        rest -= size
    starts = itertools.accumulate(sizes, initial=0)
    return list(zip(starts, sizes, strict=False))


@functools.lru_cache(maxsize=64)
def _insert_row(shape: InsertShape) -> tuple[str, int, frozenset[int]]:
    """One row's VALUES text for `shape` (the columns it names, see InsertShape), its
    bound values, and the positions among its sent values that are times."""
    values = [
        "?" if c.published_as or isinstance(c.initial, Initial) else str(c.initial)
        for c in shape.columns
    ]
    times = frozenset(i for i, c in enumerate(shape.sent) if c.type is Timestamp)
    return f"({', '.join(values)})", values.count("?"), times


@functools.lru_cache(maxsize=256)
def _insert_sql(table: str, rows: int, shape: InsertShape) -> str:
    columns = ", ".join(c.name for c in shape.columns)
    return f"INSERT INTO {table} ({columns}) VALUES " + ", ".join([_insert_row(shape)[0]] * rows)


#: the database clock as SQL text: `clock.utc_now` as SQLite renders it
_NOW = str(utc_now().compile(dialect=sqlite_dialect()))


# VALUES columns are column1..column7: id, token, state, attempts, first_at, last_at, error
_ARCHIVE_COLUMNS, _ARCHIVE_VALUES = archive_copy(
    {
        "state": "o.column3",
        "attempts_count": "o.column4",
        "first_attempt_at": "o.column5",
        "last_attempt_at": "o.column6",
        "last_error": "COALESCE(o.column7, m.last_error)",
    }
)


@functools.lru_cache(maxsize=256)
def _archive_sql(message: str, archive: str, rows: int) -> str:
    values = ", ".join(["(?, ?, ?, ?, ?, ?, ?)"] * rows)
    return (
        f"INSERT INTO {archive} ({', '.join(_ARCHIVE_COLUMNS)}, archived_at) "
        f"SELECT {', '.join(_ARCHIVE_VALUES)}, {_NOW} "
        f"FROM (VALUES {values}) AS o JOIN {message} AS m "
        f"ON m.id = o.column1 AND m.{TOKEN_COLUMN} = o.column2 AND m.state = 'PROCESSING'"
    )


@functools.lru_cache(maxsize=256)
def _delete_sql(message: str, rows: int) -> str:
    # The fenced rows are found by key in a subquery; a row-value IN list here made
    # SQLite scan every PROCESSING row instead.
    pairs = ", ".join(["(?, ?)"] * rows)
    return (
        f"DELETE FROM {message} WHERE id IN (SELECT m.id FROM (VALUES {pairs}) AS o "
        f"JOIN {message} AS m ON m.id = o.column1 AND m.{TOKEN_COLUMN} = o.column2 "
        "AND m.state = 'PROCESSING')"
    )


def ready_of_one_priority(tables: QueueTables) -> sa.Select:
    """The ids a claim takes from one priority (:claim_priority), oldest first, up to
    :claim_limit, as one JSON array. SQLite runs in process, so a claim probes the
    priorities one by one, highest first, on the driver's thread and stops at its
    limit: a probe of an empty priority costs one index lookup, where one compound
    statement over every priority sorted each one's rows again to merge them."""
    ready = ready_ids(tables, sa.bindparam("claim_priority", type_=sa.Integer())).subquery()
    return sa.select(sa.func.json_group_array(ready.c.id), sa.func.count())


#: the catalogue's statements the wake-up watcher runs (watcher.py)
WATCHER_STATEMENTS = (
    "watch_reads_only",
    "watch_never_waits",
    "data_version",
    "newest_message",
    "new_messages",
)


def in_memory(database: str, *, uri: bool) -> bool:
    """Whether the pool's connections open an in-memory database, which no other
    process can reach."""
    if database in ("", ":memory:"):
        return True
    return uri and (database.startswith("file::memory:") or "mode=memory" in database)


def _connect(database: str, options: dict[str, Any]) -> sqlite3.Connection:
    # the dialect's arguments are sqlite3.connect's own, typed as a plain dict
    connect: Callable[..., sqlite3.Connection] = sqlite3.connect
    return connect(database, **options)


def stored_text(value: datetime) -> str:
    """A naive UTC time as stored: the text `clock.utc_now` renders on SQLite
    (milliseconds, padded to six digits), so text comparisons stay exact."""
    return f"{value:%Y-%m-%d %H:%M:%S}.{value.microsecond // 1000:03d}000"


def _field(position: int) -> str:
    return f"json_extract(o.value, '$[{position}]')"


# A claim sends every column but those all its rows share, and claim() puts them back
# in CLAIMED_COLUMNS order (the conformance tests check every claimed field). The
# columns of the message options come as one part, NULL while every one of them is
# at its default: a plain message's row is shorter to build, to read and to unpack.
_SENT_CLAIM_COLUMNS = tuple(c for c in CLAIMED_COLUMNS if c not in SHARED_CLAIM_COLUMNS)
_OPTION_COLUMNS = (
    "expires_at", "priority", "ordering_key", "idempotency_key", "channel", "saved_state",
)  # fmt: skip
_COUNT_CLAIM = ", ".join(f"{name} = {name} + 1" for name in CLAIM_COUNTERS)
assert _SENT_CLAIM_COLUMNS == (
    "id", "headers", "payload", "attempts_count", "deliveries_count", "created_at",
    "next_attempt_at", "first_attempt_at", "last_attempt_at", "correlation_id",
    "claims_count", *_OPTION_COLUMNS,
), "_claim_row_sql sends these, the options as one part before the claim count"  # fmt: skip
#: the option columns' values while a message uses none of them
_NO_OPTIONS = (None, 0, None, None, None, None)
#: the values a claim sends per row: the plain columns, and the options as one value
_ROW_WIDTH = len(_SENT_CLAIM_COLUMNS) - len(_OPTION_COLUMNS) + 1


def _claim_value(name: str) -> str:
    """What a claim's JSON row holds for column `name`: bytes as hex (JSON has none),
    counters as the claim writes them."""
    if name == "payload":
        return "hex(payload)"
    if name == "saved_state":  # hex(NULL) is '', not NULL
        return "CASE WHEN saved_state IS NULL THEN NULL ELSE hex(saved_state) END"
    if name in CLAIM_COUNTERS:
        return f"{name} + 1"
    return name


def _claim_row_sql() -> str:
    """One claimed row as JSON: its columns, the options' part (an array) before the
    last, the claim count."""
    plain = [_claim_value(n) for n in _SENT_CLAIM_COLUMNS if n not in _OPTION_COLUMNS]
    assert plain[0] == "id" and plain[-1] == "claims_count + 1"
    unused = " AND ".join(
        f"{name} IS NULL" if default is None else f"{name} = {default}"
        for name, default in zip(_OPTION_COLUMNS, _NO_OPTIONS, strict=True)
    )
    options = ", ".join(map(_claim_value, _OPTION_COLUMNS))
    return (
        f"json_array({', '.join(plain[:-1])}, "
        f"CASE WHEN {unused} THEN NULL ELSE json_array({options}) END, {plain[-1]})"
    )


def _claimed_rows_sql(message: str) -> str:
    """The claimed rows (ids in the JSON array ?) as one flat JSON array, row after row,
    `_ROW_WIDTH` values each, and the claim's time. Flat, not an array of arrays: a
    list per row made a thousand objects per claim for the garbage collector to track,
    and, alive while the claim's messages were built, they outlived a collection and
    were promoted to the oldest generation, which every full collection walks again.
    A row starts with its id and ends with its claim count, both integers, so trimming
    brackets off its ends takes only its own (substr would count its characters)."""
    return (
        f"SELECT coalesce('[' || group_concat(trim(r, '[]')) || ']', '[]'), {_NOW} "
        f"FROM (SELECT {_claim_row_sql()} AS r FROM {message} "
        "WHERE id IN (SELECT value FROM json_each(?)))"
    )


def _claimed_messages(
    values: list[Any], queue: str, acquired_at: datetime, claimed_at: float
) -> list[ClaimedMessage]:
    """A claim's flat JSON document, read: the payload and saved state come as hex
    (JSON has no bytes), times as SQLite's text. Hot path: per claimed message, one
    unpacking of the values zip takes from the list, and no call but the conversions."""
    claimed: list[ClaimedMessage] = []
    append = claimed.append
    fields = iter(values)
    for (
        id_, headers, payload, attempts, deliveries, created, due, first, last,
        correlation_id, options, claims,
    ) in zip(*[fields] * _ROW_WIDTH, strict=True):  # fmt: skip
        expires, priority, ordering_key, idempotency_key, channel, state = options or _NO_OPTIONS
        append(
            ClaimedMessage(
                id_,
                queue,
                stored_headers(headers),
                bytes.fromhex(payload),
                attempts,
                deliveries,
                _from_text(created),
                _from_text(due),
                acquired_at,
                None if first is None else _from_text(first),
                None if last is None else _from_text(last),
                correlation_id,
                claims,
                None if expires is None else _from_text(expires),
                priority,
                ordering_key,
                idempotency_key,
                channel,
                None if state is None else bytes.fromhex(state),
                claimed_at,
            )
        )
    return claimed


_from_text = datetime.fromisoformat


async def in_driver_thread(conn: AsyncConnection, work: Callable[[Any], T]) -> T:
    """Run `work(dbapi_connection)` on the thread where the driver runs statements,
    in one hand-off.

    aiosqlite runs every call in its own thread, and a statement through SQLAlchemy
    costs three or four calls (cursor, execute, fetch, close), each of which must get
    the GIL back from the event loop. A busy loop lets go of the GIL only briefly, and
    CPython's switch interval never forces a hand-off while the loop keeps doing so,
    so each call can wait tens of milliseconds behind running handlers. A whole
    operation as one call, with as few statements as possible, keeps claims and
    outcome writes prompt (`_aiosqlite` makes the call); any other driver runs `work`
    through SQLAlchemy instead.
    """
    raw = await conn.get_raw_connection()
    if not runs_calls_in_thread(raw.driver_connection):
        return await through_sqlalchemy(conn, work)
    return await call_in_thread(raw.driver_connection, work)


async def call_in_thread(native: Any, work: Callable[[Any], T]) -> T:
    """`work(sqlite3 connection)` on aiosqlite's thread, its errors as SQLAlchemy's,
    with prompt GIL hand-offs while it runs (see `_gil`)."""
    try:
        with short_switch_interval:
            return await run_in_thread(native, work)
    except sqlite3.Error as exc:
        raise _as_sqlalchemy_error(exc) from exc


async def through_sqlalchemy(conn: AsyncConnection, work: Callable[[Any], T]) -> T:
    """`work(dbapi_connection)` through SQLAlchemy's adapted driver: a call per step."""
    try:
        return await conn.run_sync(lambda sync: work(sync.connection.dbapi_connection))
    except sqlite3.Error as exc:
        raise _as_sqlalchemy_error(exc) from exc


def _as_sqlalchemy_error(exc: sqlite3.Error) -> sa.exc.StatementError:
    # What SQLAlchemy raises for the same error on every other route and database, so
    # callers (an outbox publish, say) catch one family of exceptions everywhere.
    return sa.exc.DBAPIError.instance(None, None, exc, sqlite3.Error)


def on_cursor(work: Callable[[Any], T]) -> Callable[[Any], T]:
    """`work(cursor)` as a function of the DB-API connection, the cursor closed after."""

    def run(dbapi_connection: Any) -> T:
        cursor = dbapi_connection.cursor()
        try:
            return work(cursor)
        finally:
            cursor.close()

    return run


def immediate_transaction(work: Callable[[Any], T]) -> Callable[[Any], T]:
    """`work(cursor)` inside BEGIN IMMEDIATE ... COMMIT, rolled back if it fails."""

    def in_transaction(cursor: Any) -> T:
        cursor.execute(_BEGIN_WRITE)
        try:
            result = work(cursor)
            cursor.execute(_COMMIT)
        except BaseException:
            try:
                cursor.execute(_ROLLBACK)
            except sqlite3.OperationalError:
                pass  # SQLite already rolled back (some errors end the transaction)
            raise
        return result

    return on_cursor(in_transaction)


#: how long a connection tries to switch a file to WAL, all attempts together: the busy
#: timeout's length (queries.sql), so a switch never waits longer than a write would
_WAL_SWITCH_SECONDS = 30.0


def switch_to_wal(cursor: Any, statement: str, within: float = _WAL_SWITCH_SECONDS) -> None:
    """Put the file in WAL mode with `statement`, waiting for other connections' locks.

    Switching a file that is not yet in WAL mode (a new file, or one migrated by an
    engine of the user's) needs the file to itself. While another connection holds
    its write lock (a writer, or another connection switching it), SQLite refuses the
    switch at once, whatever busy_timeout says: two brokers or admins opening such a
    file together could fail on their first connection with "database is locked".
    The one refused waits for that lock as any writer does (BEGIN IMMEDIATE waits
    under busy_timeout, on the driver's thread) and tries again, for `within` seconds
    in all. Once the file is in WAL mode the switch is a no-op that takes no lock.
    """
    deadline = time.monotonic() + within
    while True:
        try:
            cursor.execute(statement)
            return
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() >= deadline:
                raise
            _release_failed_statement(exc)
        cursor.execute(_BEGIN_WRITE)
        cursor.execute(_ROLLBACK)


def _release_failed_statement(exc: BaseException) -> None:
    """Let go, now, of what the frames of a refused statement's exception hold.

    SQLAlchemy 2.0's aiosqlite adapter leaves the cursor of a statement that raised
    open, held only by the exception's frames, a cycle the garbage collector frees
    later on the event loop's thread. Finalising that cursor needs its connection's
    mutex, which the BEGIN IMMEDIATE below holds on the driver's thread for as long as
    it waits for the write lock: the whole loop would stop until the busy timeout,
    and the connection holding the lock, when it is this process's, could never
    commit. With the finished frames cleared, the driver's thread frees the cursor
    when it takes the next call, before that BEGIN runs. (Frames still running, this
    function's caller among them, are left as they are.)"""
    traceback.clear_frames(exc.__traceback__)


#: SQLite's primary result code for a lock another connection holds
_SQLITE_BUSY = 5


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    # sqlite_errorcode is Python 3.11's; on 3.10 the message is all there is
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) == _SQLITE_BUSY
    return "database is locked" in str(exc)


class SQLiteDriver(Driver):
    name = "sqlite"
    queries_package = "faststream_sqla.drivers.sqlite"
    channel_claim_type = SQLiteChannelClaim
    times_as_text = True

    def __init__(self, tables: QueueTables) -> None:
        super().__init__(tables)
        self._claim_sql: tuple[str, str, Any] | None = None
        # SQLite has one writer at a time, and a writer that finds the lock taken
        # sleeps in SQLite's busy handler (1, 2, 5 ... 100 ms steps) rather than being
        # woken when it is free. Our own writers (claims, outcomes, leases, publishes)
        # queue here instead, and are handed the lock the moment it is released.
        self._writer = asyncio.Lock()
        #: the watcher's look for due messages, by the queues it asks about
        self._watch_statements = DriverStatements()

    def not_among(self, column: sa.ColumnElement[int], name: str) -> sa.ColumnElement[bool]:
        ids = sa.func.json_each(sa.bindparam(name)).table_valued("value")
        return column.not_in(sa.select(ids.c.value))

    #: the claim's session holds the writer lock from its read to its write
    reads_channels_ahead = False

    @asynccontextmanager
    async def own_transaction(self, engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
        async with self._writer, engine.begin() as conn:
            yield conn

    def configure_engine(self, engine: AsyncEngine, *, owned: bool) -> None:
        if not owned:
            # A user's engine keeps its own settings. WAL is the file's own once set: any
            # engine of ours that opened the file set it.
            return

        pragmas = [_QUERIES.without_tables(name) for name in ("busy_timeout", "foreign_keys")]
        use_wal = _QUERIES.without_tables("journal_mode_wal")
        begin_read, begin_write = map(_QUERIES.without_tables, ("begin_read", "begin_write"))

        @event.listens_for(engine.sync_engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # Take transaction control from the driver so BEGIN IMMEDIATE can be issued:
            # a deferred transaction that later writes fails at once with SQLITE_BUSY
            # instead of waiting on busy_timeout.
            dbapi_conn.isolation_level = None
            cursor = dbapi_conn.cursor()
            for pragma in pragmas:
                cursor.execute(pragma)
            switch_to_wal(cursor, use_wal)
            cursor.close()

        @event.listens_for(engine.sync_engine, "begin")
        def _on_begin(conn: Any) -> None:
            reads_only = conn.get_execution_options().get(READS_ONLY_OPTION)
            conn.exec_driver_sql(begin_read if reads_only else begin_write)

    async def _write(self, engine: AsyncEngine, work: Callable[[Any], T]) -> T:
        """`work(cursor)` as one immediate transaction, in one hand-off to the driver.

        The pooled connection is used directly, without SQLAlchemy's `Connection`. Once
        the transaction has committed, the next writer may begin, and the connection
        goes back to the pool without the pool's rollback, which would be another
        hand-off to the driver's thread for a transaction already over (inside the lock
        it held every other writer back, for tens of milliseconds during a busy drain).
        After a failure or a cancellation the lock is kept until the connection is back,
        with the usual rollback, so a transaction still running on the driver's thread
        cannot overlap the next writer's.
        """
        await self._writer.acquire()
        held = True
        raw: Any = None
        committed = False
        try:
            raw = await engine.raw_connection()
            if not runs_calls_in_thread(raw.driver_connection):
                await check_in(raw, transaction_ended=False)
                raw = None
                async with engine.connect() as conn:
                    return await through_sqlalchemy(conn, immediate_transaction(work))
            result = await call_in_thread(raw.driver_connection, immediate_transaction(work))
            committed = True
            self._writer.release()
            held = False
            return result
        finally:
            if raw is not None:
                # After a failure or cancellation, the usual check-in: its rollback is
                # queued behind the work on the driver's thread, and the lock is held
                # until it is done. After a commit, none (see _pool.check_in).
                await check_in(raw, transaction_ended=committed)
            if held:
                self._writer.release()

    def _claim_statements(self, engine: AsyncEngine) -> tuple[str, str, Any]:
        if self._claim_sql is None:
            m = self._q(engine, self.tables.message)
            ready = ready_of_one_priority(self.tables).compile(dialect=engine.dialect)
            # The claimed rows come back as one JSON document: fetching rows one by one
            # takes the GIL back once per row, the hand-off in_driver_thread avoids.
            # The returned values are those the UPDATE below writes.
            # What all rows share (the queue asked for, the claim's time) comes once.
            select = _claimed_rows_sql(m)
            # The ids the probes found (the transaction holds the write lock); the time
            # read above is the one stored.
            update = (
                f"UPDATE {m} SET state = 'PROCESSING', "
                f"{_COUNT_CLAIM}, acquired_at = ? "
                "WHERE id IN (SELECT value FROM json_each(?))"
            )
            self._claim_sql = (select, update, ready)
        return self._claim_sql

    async def claim(self, engine: AsyncEngine, queue: str, limit: int) -> list[ClaimedMessage]:
        select, update, ready = self._claim_statements(engine)
        names = ready.positiontup
        values = ready.construct_params(
            {"claim_queue": queue, "claim_priority": 0, "claim_limit": limit}
        )
        params = [values[name] for name in names]
        at_priority, at_limit = names.index("claim_priority"), names.index("claim_limit")
        probe = ready.string

        def work(cursor: Any) -> tuple[str, str] | None:
            # the probes' JSON arrays of ids go back to SQLite as text, joined, never
            # decoded here
            found: list[str] = []
            taken = 0
            for priority in PRIORITIES:
                params[at_priority], params[at_limit] = priority, limit - taken
                ids, count = cursor.execute(probe, params).fetchone()
                if count:
                    found.append(ids)
                    taken += count
                    if taken >= limit:
                        break
            if not taken:
                return None
            ids = found[0] if len(found) == 1 else f"[{','.join(f[1:-1] for f in found)}]"
            document, now = cursor.execute(select, (ids,)).fetchone()
            cursor.execute(update, (now, ids))
            return document, now

        result = await self._write(engine, work)
        if result is None:
            return []
        document, now = result
        acquired_at = datetime.fromisoformat(now)  # shared by every row: read once
        claimed_at = time.monotonic()
        claimed = _claimed_messages(json.loads(document), queue, acquired_at, claimed_at)
        # Aggregate order is unspecified in SQLite.
        sort_in_claim_order(claimed)
        return claimed

    def _requeue_statement(self, engine: AsyncEngine) -> str:
        return self._sql(engine, "requeue")

    async def write_outcomes(self, engine: AsyncEngine, outcomes: Sequence[Outcome]) -> int:
        # SQLite runs in process: rows are bound by the driver in C, not taken apart from
        # a JSON document by SQL. Terminal outcomes, the common case, are a multi-row
        # VALUES list joined to the messages by key (one step per statement, cheaper than
        # an executemany of the same work); requeues, rarer, an executemany.
        m = self._q(engine, self.tables.message)
        a = self._q(engine, self.tables.archive)
        # the state, not the `archives` property: two Python calls less per outcome
        done = [o for o in outcomes if o.state in TERMINAL]
        statements: list[tuple[str, tuple[Any, ...], bool]] = []  # sql, values, counts
        for start, size in chunks(len(done), _MAX_ARCHIVE_ROWS):
            chunk = done[start : start + size]
            archived: list[Any] = []
            fence: list[Any] = []
            for o in chunk:
                archived += (
                    o.id,
                    o.token,
                    o.state.value,
                    o.attempts_count,
                    timestamp_text(o.first_attempt_at),
                    timestamp_text(o.last_attempt_at),
                    o.last_error,
                )
                fence += (o.id, o.token)
            statements.append((_archive_sql(m, a, len(chunk)), tuple(archived), False))
            statements.append((_delete_sql(m, len(chunk)), tuple(fence), True))
        requeued = [
            (
                o.state.value,
                o.attempts_count,
                o.deliveries_count,
                timestamp_text(o.first_attempt_at),
                timestamp_text(o.last_attempt_at),
                timestamp_text(o.next_attempt_at),
                o.last_error,
                o.id,
                o.token,
            )
            for o in outcomes
            if o.state not in TERMINAL
        ]
        requeue = self._requeue_statement(engine)

        def work(cursor: Any) -> int:
            changed = 0
            for sql, values, counts in statements:
                cursor.execute(sql, values)
                if counts:
                    changed += max(cursor.rowcount, 0)
            if requeued:
                cursor.executemany(requeue, requeued)
                changed += max(cursor.rowcount, 0)
            return changed

        return await self._write(engine, work)

    async def extend_leases(self, engine: AsyncEngine, leases: Sequence[tuple[int, int]]) -> int:
        sql = self._sql(engine, "extend_leases")
        document = leases_document(leases)

        def work(cursor: Any) -> int:
            cursor.execute(sql, (document,))
            return max(cursor.rowcount, 0)

        return await self._write(engine, work)

    def _insert_work(self, table: str, rows: Sequence[NewMessage]) -> Callable[[Any], list[int]]:
        """The inserts of `rows` as `work(cursor)`, returning their ids in order.

        Multi-row INSERTs at the driver level: SQLite runs in process, so the cost is
        per-row work; one statement of many rows steps once where executemany steps per
        row. A batch is a few statements of power-of-two sizes (`chunks`), whose texts
        stay prepared in sqlite3's statement cache. The database clock of an
        embedded database is this machine's clock, so the batch's times are computed
        here once, not by strftime calls on every row.
        """
        now = datetime.now(timezone.utc).replace(tzinfo=None)
        created = stored_text(now)
        due_after: dict[float, str] = {0.0: created}
        params: list[Any] = []
        due: str | None
        shape = insert_shape(rows)
        _, per_row, times = _insert_row(shape)
        # `params += tuple` per row, not a tuple built by unpacking: this loop runs per
        # published message
        for r, values in zip(rows, map(shape.values, rows), strict=True):
            if r.publish_at is not None:  # the caller's time, to the microsecond
                due = r.publish_at.isoformat(" ", "microseconds")
            elif (due := due_after.get(r.publish_delay)) is None:
                due = due_after[r.publish_delay] = stored_text(
                    now + timedelta(seconds=r.publish_delay)
                )
            if times:
                # stored in the text form SQLAlchemy uses, not the driver's default
                values = tuple(timestamp_text(v) if i in times else v for i, v in enumerate(values))
            params += values
            params += (created, due)  # CLIENT_INITIALS order
        statements = []
        most = min(4096, _MAX_VARIABLES // per_row)  # rows per INSERT
        for start, size in chunks(len(rows), most):
            values = tuple(params[start * per_row : (start + size) * per_row])
            statements.append((_insert_sql(table, size, shape), values))

        def work(cursor: Any) -> list[int]:
            for sql, values in statements:
                cursor.execute(sql, values)
            # The write lock is ours from the first row to the last, and AUTOINCREMENT
            # hands out consecutive ids, so the batch's ids end at the last row's.
            last: int = cursor.lastrowid
            return list(range(last - len(rows) + 1, last + 1))

        return work

    async def insert_messages(self, conn: AsyncConnection, rows: Sequence[NewMessage]) -> list[int]:
        if not conn.in_transaction():
            # The statements bypass SQLAlchemy, which would otherwise not know that the
            # driver began a transaction, and the caller's commit() would do nothing.
            await conn.begin()
        work = self._insert_work(self._q(conn, self.tables.message), rows)
        return await in_driver_thread(conn, on_cursor(work))

    async def insert_committed(
        self, engine: AsyncEngine, rows: Sequence[NewMessage], *, relaxed: bool = False
    ) -> list[int]:
        return await self._write(
            engine, self._insert_work(self._q(engine, self.tables.message), rows)
        )

    def listener(
        self,
        engine: AsyncEngine,
        hooks: WakeupHooks,
    ) -> SQLiteWatcher | None:
        args, kwargs = engine.dialect.create_connect_args(engine.url)
        database = str(args[0])
        if in_memory(database, uri=bool(kwargs.get("uri"))):
            return None  # no other process can open it
        # the file as the pool opens it, on a connection of the watcher's own
        options: dict[str, Any] = {
            **kwargs,
            "check_same_thread": False,
            "isolation_level": None,
        }
        statements = {name: self._sql(engine, name) for name in WATCHER_STATEMENTS}
        return SQLiteWatcher(
            functools.partial(_connect, database, options),
            statements,
            hooks,
            due_statement=functools.partial(self._due_statement, engine),
        )

    def _due_statement(
        self, engine: AsyncEngine, queues: tuple[str, ...]
    ) -> tuple[str, Sequence[Any]]:
        statement = self._watch_statements.get(
            queues, engine.dialect, lambda: queues_with_due_messages(self.tables, queues), ()
        )
        return statement.sql, statement.arguments({})

    @asynccontextmanager
    async def _bound_reads(self, conn: AsyncConnection, seconds: float) -> AsyncIterator[None]:
        # Two ways a read outlasts its bound: waiting for another connection's lock, which
        # SQLite spends in its busy handler (an interrupt does not end that wait, so the
        # wait itself is cut to the bound), and running long, which an interrupt of the
        # connection ends (aiosqlite's interrupt() is called off its queue, at once).
        waits_ms = await conn.scalar(sa.text(_QUERIES.without_tables("read_busy_timeout")))
        await conn.execute(sa.text(f"PRAGMA busy_timeout = {max(1, round(seconds * 1000))}"))
        native = (await conn.get_raw_connection()).driver_connection
        interrupt = getattr(native, "interrupt", None)
        loop = asyncio.get_running_loop()
        timer = (
            loop.call_later(seconds, lambda: loop.create_task(interrupt()))
            if callable(interrupt)
            else None
        )
        try:
            yield
        finally:
            if timer is not None:
                timer.cancel()
            await conn.execute(sa.text(f"PRAGMA busy_timeout = {int(waits_ms)}"))

    def is_read_timeout(self, exc: BaseException) -> bool:
        orig = getattr(exc, "orig", None) or exc
        return isinstance(orig, sqlite3.OperationalError) and (
            "interrupted" in str(orig) or "locked" in str(orig)
        )

    def is_transient(self, exc: BaseException) -> bool:
        orig = getattr(exc, "orig", None) or exc
        return isinstance(orig, sqlite3.OperationalError) and (
            "locked" in str(orig) or "busy" in str(orig)
        )

    def is_disconnect(self, exc: BaseException) -> bool:
        return False  # an embedded database has no connection to lose

    def _cannot_open(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and "unable to open" in str(exc)
