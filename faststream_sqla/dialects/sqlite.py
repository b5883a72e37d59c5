"""SQLite (the embedded default): WAL, immediate write transactions, UPDATE ... RETURNING."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.clock import utc_now
from faststream_sqla.schema import MessageState, QueueTables

from ._claim import claimed_columns, ready_ids
from .base import (
    CLAIM_ORDER,
    Dialect,
    NewMessage,
    Outcome,
    leases_document,
    timestamp_text,
)

BUSY_TIMEOUT_MS = 30_000

_INSERT_PARAMS = 6  # bound values per inserted row
# SQLite's limit on bound variables per statement: 999 before 3.32, 32766 since.
_MAX_VARIABLES = 32766 if sqlite3.sqlite_version_info >= (3, 32) else 999
_MAX_INSERT_ROWS = min(5000, _MAX_VARIABLES // _INSERT_PARAMS)  # rows per INSERT
_ARCHIVE_PARAMS = 7  # bound values per archived outcome
_MAX_ARCHIVE_ROWS = min(4000, _MAX_VARIABLES // _ARCHIVE_PARAMS)


@functools.lru_cache(maxsize=256)
def _insert_sql(table: str, rows: int) -> str:
    row = "(?, ?, ?, 'PENDING', 0, 0, ?, ?, ?)"
    return (
        f"INSERT INTO {table} (queue, headers, payload, state, attempts_count, "
        f"deliveries_count, created_at, next_attempt_at, correlation_id) VALUES "
        + ", ".join([row] * rows)
    )


@functools.lru_cache(maxsize=256)
def _archive_sql(message: str, archive: str, rows: int) -> str:
    # VALUES columns are column1..column7: id, token, state, attempts, first_at, last_at, error
    values = ", ".join(["(?, ?, ?, ?, ?, ?, ?)"] * rows)
    return (
        f"INSERT INTO {archive} (id, queue, headers, payload, state, attempts_count, "
        "deliveries_count, created_at, first_attempt_at, last_attempt_at, last_error, "
        "correlation_id, archived_at) "
        "SELECT m.id, m.queue, m.headers, m.payload, o.column3, o.column4, m.deliveries_count, "
        "m.created_at, o.column5, o.column6, COALESCE(o.column7, m.last_error), "
        "m.correlation_id, strftime('%Y-%m-%d %H:%M:%f', 'now') || '000' "
        f"FROM (VALUES {values}) AS o JOIN {message} AS m "
        "ON m.id = o.column1 AND m.deliveries_count = o.column2 AND m.state = 'PROCESSING'"
    )


@functools.lru_cache(maxsize=256)
def _delete_sql(message: str, rows: int) -> str:
    # The fenced rows are found by key in a subquery; a row-value IN list here made
    # SQLite scan every PROCESSING row instead.
    pairs = ", ".join(["(?, ?)"] * rows)
    return (
        f"DELETE FROM {message} WHERE id IN (SELECT m.id FROM (VALUES {pairs}) AS o "
        f"JOIN {message} AS m ON m.id = o.column1 AND m.deliveries_count = o.column2 "
        "AND m.state = 'PROCESSING')"
    )


def stored_text(value: datetime) -> str:
    """A naive UTC time as stored: the text `clock.utc_now` renders on SQLite
    (milliseconds, padded to six digits), so text comparisons stay exact."""
    return f"{value:%Y-%m-%d %H:%M:%S}.{value.microsecond // 1000:03d}000"


def _field(position: int) -> str:
    return f"json_extract(o.value, '$[{position}]')"


class SQLiteDialect(Dialect):
    name = "sqlite"

    def __init__(self, tables: QueueTables) -> None:
        super().__init__(tables)
        m = tables.message
        self._claim = (
            sa.update(m)
            .where(m.c.id.in_(ready_ids(m).scalar_subquery()))
            .values(
                state=MessageState.PROCESSING,
                deliveries_count=m.c.deliveries_count + 1,
                acquired_at=utc_now(),
            )
            .returning(*claimed_columns(m))
        )
        self._requeue_sql: str | None = None
        # SQLite has one writer at a time, and a writer that finds the lock taken
        # sleeps in SQLite's busy handler (1, 2, 5 ... 100 ms steps) rather than being
        # woken when it is free. Our own writers (claims, outcomes, leases, publishes)
        # queue here instead, and are handed the lock the moment it is released.
        self._writer = asyncio.Lock()

    @asynccontextmanager
    async def own_transaction(self, engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
        async with self._writer, engine.begin() as conn:
            yield conn

    def configure_engine(self, engine: AsyncEngine, *, owned: bool) -> None:
        if not owned:
            return  # a user's engine keeps its own settings; WAL is set on the file below

        @event.listens_for(engine.sync_engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # Take transaction control from the driver so BEGIN IMMEDIATE can be issued:
            # a deferred transaction that later writes fails at once with SQLITE_BUSY
            # instead of waiting on busy_timeout.
            dbapi_conn.isolation_level = None
            cursor = dbapi_conn.cursor()
            cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.close()

        @event.listens_for(engine.sync_engine, "begin")
        def _on_begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    async def claim(self, engine: AsyncEngine, queue: str, limit: int) -> list[Sequence[Any]]:
        async with self.own_transaction(engine) as conn:
            result = await conn.execute(self._claim, {"claim_queue": queue, "claim_limit": limit})
            rows: list[Sequence[Any]] = list(result.all())
        # RETURNING order is unspecified in SQLite; stored times are text that sorts.
        rows.sort(key=CLAIM_ORDER)
        return rows

    def _requeue_statement(self, engine: AsyncEngine) -> str:
        if self._requeue_sql is None:
            m = self._q(engine, self.tables.message)
            self._requeue_sql = (
                f"UPDATE {m} SET state = ?, attempts_count = ?, deliveries_count = ?, "
                "first_attempt_at = ?, last_attempt_at = ?, "
                "next_attempt_at = COALESCE(?, next_attempt_at), "
                "last_error = COALESCE(?, last_error), acquired_at = NULL "
                "WHERE id = ? AND deliveries_count = ? AND state = 'PROCESSING'"
            )
        return self._requeue_sql

    async def write_outcomes(self, engine: AsyncEngine, outcomes: Sequence[Outcome]) -> int:
        # SQLite runs in process: rows are bound by the driver in C, not taken apart from
        # a JSON document by SQL. Terminal outcomes, the common case, are a multi-row
        # VALUES list joined to the messages by key (one step per statement, ~35% less
        # than an executemany of the same work); requeues, rarer, an executemany.
        m = self._q(engine, self.tables.message)
        a = self._q(engine, self.tables.archive)
        done = [o for o in outcomes if o.archives]
        back = [o for o in outcomes if not o.archives]
        changed = 0
        async with self.own_transaction(engine) as conn:
            for start in range(0, len(done), _MAX_ARCHIVE_ROWS):
                chunk = done[start : start + _MAX_ARCHIVE_ROWS]
                archived: list[Any] = []
                fence: list[Any] = []
                for o in chunk:
                    archived += (
                        o.id, o.token, o.state.value, o.attempts_count,
                        timestamp_text(o.first_attempt_at), timestamp_text(o.last_attempt_at), o.last_error,
                    )
                    fence += (o.id, o.token)
                await conn.exec_driver_sql(_archive_sql(m, a, len(chunk)), tuple(archived))
                result = await conn.exec_driver_sql(_delete_sql(m, len(chunk)), tuple(fence))
                changed += result.rowcount or 0
            if back:
                result = await conn.exec_driver_sql(
                    self._requeue_statement(engine),
                    [
                        (o.state.value, o.attempts_count, o.deliveries_count,
                         timestamp_text(o.first_attempt_at), timestamp_text(o.last_attempt_at),
                         timestamp_text(o.next_attempt_at), o.last_error, o.id, o.token)
                        for o in back
                    ],
                )
                changed += result.rowcount or 0
        return changed

    async def extend_leases(self, engine: AsyncEngine, leases: Sequence[tuple[int, int]]) -> int:
        m = self._q(engine, self.tables.message)
        stmt = sa.text(
            f"UPDATE {m} AS m SET acquired_at = strftime('%Y-%m-%d %H:%M:%f', 'now') || '000' "
            f"FROM json_each(:leases) AS o WHERE m.id = {_field(0)} "
            f"AND m.deliveries_count = {_field(1)} AND m.state = 'PROCESSING'"
        )
        async with self.own_transaction(engine) as conn:
            result = await conn.execute(stmt, {"leases": leases_document(leases)})
            return result.rowcount or 0

    async def insert_messages(self, conn: AsyncConnection, rows: Sequence[NewMessage]) -> list[int]:
        # Multi-row INSERTs at the driver level: SQLite runs in process, so the cost is
        # per-row work; one statement of many rows steps once where executemany steps
        # per row (~1 us a row less), and SQLAlchemy's per-row parameter processing is
        # skipped. Each statement costs several hops to aiosqlite's thread, so a batch
        # is as few statements as SQLite's variable limit allows; sqlite3 caches the
        # prepared text of each size.
        # The database clock of an embedded database is this machine's clock, so the
        # batch's times are computed here once, not by strftime calls on every row.
        m = self._q(conn, self.tables.message)
        now = datetime.now(timezone.utc).replace(tzinfo=None)
        created = stored_text(now)
        due_after: dict[float, str] = {0.0: created}
        params: list[Any] = []
        for r in rows:
            if r.publish_at is not None:  # the caller's time, to the microsecond
                due = r.publish_at.isoformat(" ", "microseconds")
            elif (due := due_after.get(r.publish_delay)) is None:
                due = due_after[r.publish_delay] = stored_text(
                    now + timedelta(seconds=r.publish_delay)
                )
            params += (r.queue, r.headers_json, r.payload, created, due, r.correlation_id)
        start = 0
        while start < len(rows):
            size = min(_MAX_INSERT_ROWS, len(rows) - start)
            await conn.exec_driver_sql(
                _insert_sql(m, size),
                tuple(params[start * _INSERT_PARAMS : (start + size) * _INSERT_PARAMS]),
            )
            start += size
        # The write lock is ours from the first row to the last, and AUTOINCREMENT hands
        # out consecutive ids, so the batch's ids end at last_insert_rowid().
        last = (await conn.exec_driver_sql("SELECT last_insert_rowid()")).scalar_one()
        return list(range(last - len(rows) + 1, last + 1))

    def is_transient(self, exc: BaseException) -> bool:
        orig = getattr(exc, "orig", None) or exc
        return isinstance(orig, sqlite3.OperationalError) and (
            "locked" in str(orig) or "busy" in str(orig)
        )

    def is_disconnect(self, exc: BaseException) -> bool:
        return False  # an embedded database has no connection to lose
