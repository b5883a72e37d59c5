"""MySQL 8 / MariaDB >= 10.6: SKIP LOCKED claim in one short READ COMMITTED transaction.

- The claim: a `UNION ALL` of one `SELECT ... FOR UPDATE SKIP LOCKED` per priority on
  the generated `ready_at` (no `LATERAL` here), read as the rows will stand once
  claimed, then one `UPDATE ... WHERE id IN (...)`.
- The outcome write: one JSON document of numbers only, joined to the messages by
  primary key through `JSON_TABLE` (`STRAIGHT_JOIN`, `FORCE INDEX (PRIMARY)`): the
  archive copy, the delete (with the key rows when the batch holds keyed messages) and
  the requeue.
- The insert: multi-row, split to fit `max_allowed_packet`; ids by `RETURNING` where
  the server has it (MariaDB), else `LAST_INSERT_ID()`; then the keys table's rows.
- Lease renewal, the first message of each ordering key, and the channel claim's
  session and write.

The broker's own transactions run on the pool's asyncmy connection (`_asyncmy`).
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.clock import micros_since_epoch, utc_now
from faststream_sqla.exceptions import MessageTooLargeError
from faststream_sqla.message import ClaimedMessage
from faststream_sqla.schema import (
    CLAIM_COUNTERS,
    MAX_KEY_LENGTH,
    PRIORITIES,
    Initial,
    MessageState,
    QueueTables,
    archive_copy,
    exact_collation,
)

from .._claim import (
    CLAIM_PARAMETERS,
    claim_limit,
    claimed_columns,
    priority_literal,
    queues_with_due_messages,
    ready_ids,
)
from .._compiled import DriverStatement, DriverStatements
from ..base import (
    CLAIMED_COLUMNS,
    TERMINAL,
    TOKEN_COLUMN,
    Driver,
    InsertShape,
    NewMessage,
    Outcome,
    WakeupHooks,
    any_row_has,
    attempt_micros,
    insert_shape,
    leases_document,
    sort_in_claim_order,
)
from ._asyncmy import DriverTransaction, error_code
from .channel_claim import MySQLChannelClaim
from .watcher import MySQLWatcher

_ACQUIRED = CLAIMED_COLUMNS.index("acquired_at")
_TOKEN = CLAIMED_COLUMNS.index(TOKEN_COLUMN)

# deadlock, lock wait timeout, "record has changed" (MariaDB optimistic conflicts)
TRANSIENT_CODES = {1213, 1205, 1020}
DISCONNECT_CODES = {2002, 2003, 2006, 2013, 2055, 1927, 4031}
#: SELECT denied on the table (1142) or a column (1143): what RETURNING needs
READ_DENIED_CODES = {1142, 1143}
#: MariaDB gave up on a statement at max_statement_time (a bounded read)
STATEMENT_TIME_EXCEEDED = 1969

# room for the statement text and the other columns of a row
PACKET_HEADROOM = 64 * 1024
DEFAULT_MAX_PACKET = 16 * 1024 * 1024
KEY_ROWS_PER_INSERT = 1000

_INITIAL_SQL = {
    Initial.NOW: "UTC_TIMESTAMP(6)",
    # the due time's parameters: the publisher's time, else its delay in microseconds
    Initial.DUE: "COALESCE(%s, UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND)",
}


@functools.lru_cache(maxsize=64)
def _insert_head(shape: InsertShape) -> str:
    """An insert's text up to its rows, naming the columns `shape` writes, with `{m}`
    for the table."""
    return f"INSERT INTO {{m}} ({', '.join(c.name for c in shape.columns)}) VALUES"


@functools.lru_cache(maxsize=64)
def _row(shape: InsertShape) -> str:
    """One row's VALUES text: a parameter for each published column `shape` sends, the
    initial values for the rest."""
    return "({})".format(
        ", ".join(
            "%s"
            if c.published_as
            # every column publishers do not fill has an initial value
            else _INITIAL_SQL.get(c.initial, str(c.initial))  # type: ignore[call-overload]
            for c in shape.columns
        )
    )


# The outcome batch as one JSON document of numbers only: an array per outcome of
# [id, token, state code, attempts, deliveries, first_us, last_us, next_us, error], times
# as microseconds since 1970 (naive UTC). asyncmy escapes every parameter on the client,
# and a document full of quoted strings cost it client CPU on every statement; without
# quotes escaping is nearly free, and numbers encode faster than formatted times.
STATE_CODES = {state: code for code, state in enumerate(MessageState, start=1)}


def outcomes_document(outcomes: Sequence[Outcome]) -> str:
    first_us, last_us = attempt_micros(outcomes)
    return json.dumps(
        [
            (
                o.id,
                o.token,
                STATE_CODES[o.state],
                o.attempts_count,
                o.deliveries_count,
                first,
                last,
                micros_since_epoch(o.next_attempt_at),
                o.last_error,
            )
            for o, first, last in zip(outcomes, first_us, last_us, strict=True)
        ],
        separators=(",", ":"),
    )


_OUTCOME_ROWS = """JSON_TABLE(:outcomes, '$[*]' COLUMNS (
    id BIGINT PATH '$[0]', token INT PATH '$[1]', state_code INT PATH '$[2]',
    attempts INT PATH '$[3]', deliveries INT PATH '$[4]',
    first_us BIGINT PATH '$[5]', last_us BIGINT PATH '$[6]',
    next_us BIGINT PATH '$[7]', error LONGTEXT PATH '$[8]')) AS o"""
_KEYED = operator.attrgetter("keyed")
_FIRST = operator.itemgetter(0)
_STATE = "ELT(o.state_code, " + ", ".join(f"'{s.value}'" for s in MessageState) + ")"


def _time(field: str) -> str:
    return f"TIMESTAMPADD(MICROSECOND, o.{field}, CAST('1970-01-01' AS DATETIME(6)))"


def _codes(*states: MessageState) -> str:
    return ", ".join(str(STATE_CODES[s]) for s in states)


_ARCHIVED = f"o.state_code IN ({_codes(*TERMINAL)})"


_COUNT_CLAIM = ", ".join(f"{name} = {name} + 1" for name in CLAIM_COUNTERS)


@functools.lru_cache(maxsize=64)
def _mark_processing_sql(table: str, rows: int) -> str:
    return (
        f"UPDATE {table} SET state = 'PROCESSING', {_COUNT_CLAIM}, "
        f"acquired_at = %s WHERE id IN ({', '.join(['%s'] * rows)})"
    )


async def _apply_outcome_statements(
    cursor: Any,
    statements: tuple[DriverStatement, DriverStatement, DriverStatement, DriverStatement],
    outcomes: Sequence[Outcome],
) -> int:
    """Run the (archive, delete or delete_keyed, requeue) statements over one outcome
    document, skipping the half a batch does not need; returns the messages changed.
    The caller owns the transaction, so the archive copy and the delete commit
    together."""
    archive, delete, delete_keyed, requeue = statements
    params = {"outcomes": outcomes_document(outcomes)}
    states = {o.state for o in outcomes}  # one pass, not one per half
    changed = 0
    if not states.isdisjoint(TERMINAL):
        # counted by the archive copy: the keyed delete's count includes the key rows
        changed += await cursor.execute(archive.sql, archive.arguments(params)) or 0
        if any(map(_KEYED, outcomes)):  # in C: this runs for every outcome
            delete = delete_keyed
        await cursor.execute(delete.sql, delete.arguments(params))
    if not states.issubset(TERMINAL):
        changed += await cursor.execute(requeue.sql, requeue.arguments(params)) or 0
    return changed


# Runs one driver-level statement (`%s` placeholders) and returns its rows, if any.
RunStatement = Callable[[str, tuple[Any, ...]], Awaitable[Sequence[Sequence[Any]]]]


class MySQLDriver(Driver):
    name = "mysql"
    queries_package = "faststream_sqla.drivers.mysql"
    channel_claim_type = MySQLChannelClaim

    @asynccontextmanager
    async def channel_transaction(self, engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
        # READ COMMITTED, for this transaction only: each statement sees what committed
        # before it, and the reads take no gap locks that publishers would wait on.
        async with engine.connect() as conn:
            await conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            yield conn
            await conn.commit()

    # SET TRANSACTION (READ COMMITTED), the locking SELECT, the UPDATE, COMMIT
    claim_round_trips = 4

    def __init__(self, tables: QueueTables) -> None:
        super().__init__(tables)
        m = tables.message
        assert tables.keys is not None, "MySQL's tables hold the keys apart"
        self._keys = tables.keys
        # Read the rows under SKIP LOCKED as they will stand once claimed (the delivery
        # counted, acquired_at the server clock read with them), then flip them: the
        # rows need no rebuilding, and both statements agree on acquired_at.
        claimed_as = {
            **{name: m.c[name] + 1 for name in CLAIM_COUNTERS},
            "acquired_at": utc_now(),
        }
        columns = [
            sa.type_coerce(claimed_as[c.name], sa.types.NullType()).label(c.name)
            if c.name in claimed_as
            else c
            for c in claimed_columns(m)
            if c.name != "id"
        ]
        # Each priority's ready rows, highest first. MariaDB runs every branch of a
        # UNION (no lateral joins), so a claim reads up to `limit` rows of each of the
        # eleven priorities and keeps the first `limit`; the others stay locked only
        # until the claim's commit, a moment later. No ORDER BY over the union: the
        # server streams a UNION ALL branch by branch, in the order written, so the
        # first `limit` rows are the highest priorities' oldest (the priority
        # tests hold it to that); an ORDER BY copied every claimed row, payload and
        # all, into a temporary table to sort it. `claim` sorts the rows it returns.
        self._lock_ready = sa.union_all(
            *(
                ready_ids(tables, priority_literal(level), *columns).with_for_update(
                    skip_locked=True
                )
                for level in PRIORITIES
            )
        ).limit(claim_limit())
        self._on_driver = DriverStatements()
        self.max_packet = DEFAULT_MAX_PACKET
        self.insert_returning = True
        self.consecutive_ids = True
        #: MariaDB's `LIMIT ROWS EXAMINED`, which the channel claim's reads bound
        #: themselves with (its channel_claim.py, MySQLChannelClaim._walk)
        self.limits_rows_examined = False

    def latest_rows(self, stmt: sa.Select) -> sa.Select:
        # InnoDB's plain reads keep the transaction's first snapshot under REPEATABLE
        # READ (MySQL's default, and maybe the caller's); a locking read sees the newest
        # committed rows, waiting for a row still being written.
        return stmt.with_for_update(read=True)

    def not_among(self, column: sa.ColumnElement[int], name: str) -> sa.ColumnElement[bool]:
        # JSON_CONTAINS takes the candidate as JSON text: an integer's text is that
        return sa.not_(sa.func.json_contains(sa.bindparam(name), sa.cast(column, sa.String())))

    async def replica_lag(self, conn: AsyncConnection) -> float | None:
        status = (await conn.execute(sa.text(self._sql(conn, "replica_status")))).mappings().first()
        if status is None:
            return 0.0  # not a replica: it is its own primary
        behind = status["Seconds_Behind_Master"]
        return None if behind is None else float(behind)

    async def prepare(self, engine: AsyncEngine) -> None:
        async with engine.connect() as conn:
            packet, autoinc = (
                await conn.execute(sa.text(self._sql(engine, "server_settings")))
            ).one()
            sa_dialect = conn.dialect
        self.max_packet = int(packet)
        # MariaDB >= 10.5 returns the ids; MySQL 8 cannot, but a multi-row INSERT gets
        # consecutive ids under auto-increment lock modes 0 and 1.
        mariadb = bool(getattr(sa_dialect, "is_mariadb", False))
        version = sa_dialect.server_version_info or (0,)
        self.insert_returning = mariadb and version >= (10, 5)
        self.consecutive_ids = int(autoinc) <= 1
        # JSON_TABLE: MariaDB 10.6, MySQL 8.0.4. The collation is the key columns' own
        # (migration 0007): a JSON_TABLE column would otherwise compare case-blind.
        self.json_table = version >= ((10, 6) if mariadb else (8, 0, 4))
        self.key_collation = exact_collation(mariadb)
        self.limits_rows_examined = mariadb

    async def first_of_keys(
        self, conn: AsyncConnection, queue: str, keys: Sequence[str]
    ) -> list[int]:
        """One descent of the ordering-key index per key, the keys travelling as one
        JSON array: MIN(id) ... GROUP BY read every message of each key instead."""
        if not self.json_table:
            return await super().first_of_keys(conn, queue, keys)
        k = self._q(conn, self._keys)
        m = self._q(conn, self.tables.message)
        result = await conn.execute(
            sa.text(
                f"SELECT (SELECT k.id FROM {k} AS k JOIN {m} AS m ON m.id = k.id"
                " WHERE k.queue = :queue AND k.ordering_key = wanted.ordering_key"
                " ORDER BY k.id LIMIT 1)"
                f" FROM JSON_TABLE(:keys, '$[*]' COLUMNS (ordering_key VARCHAR({MAX_KEY_LENGTH})"
                f" CHARACTER SET utf8mb4 COLLATE {self.key_collation} PATH '$')) AS wanted"
            ),
            {"queue": queue, "keys": json.dumps(list(keys))},
        )
        return [message_id for message_id in result.scalars() if message_id is not None]

    async def insert_messages(self, conn: AsyncConnection, rows: Sequence[NewMessage]) -> list[int]:
        async def run(sql: str, params: tuple[Any, ...]) -> Sequence[Sequence[Any]]:
            result = await conn.exec_driver_sql(sql, params)
            return result.all() if result.returns_rows else []

        return await self._insert(conn, run, rows)

    async def insert_committed(
        self, engine: AsyncEngine, rows: Sequence[NewMessage], *, relaxed: bool = False
    ) -> list[int]:
        # A publish outside the caller's transaction: on the driver (see _asyncmy).
        async with self._transaction(engine, read_committed=False) as transaction:
            cursor = transaction.cursor

            async def run(sql: str, params: tuple[Any, ...]) -> Sequence[Sequence[Any]]:
                await cursor.execute(sql, params)
                return await cursor.fetchall() or []

            return await self._insert(engine, run, rows)

    async def _insert(
        self, bind: AsyncEngine | AsyncConnection, run: RunStatement, rows: Sequence[NewMessage]
    ) -> list[int]:
        """Multi-row inserts are one packet each: split a batch so every chunk fits
        max_allowed_packet, and refuse a single message that never can."""
        m = self._q(bind, self.tables.message)
        limit = self.max_packet - PACKET_HEADROOM
        sizes = [len(row.payload) * 2 + 512 for row in rows]  # binary is sent escaped
        for row, row_size in zip(rows, sizes, strict=True):
            if row_size > limit:  # checked for all rows before any is written
                msg = (
                    f"a {len(row.payload)}-byte message does not fit this server's "
                    f"max_allowed_packet ({self.max_packet} bytes); raise it, e.g. "
                    "SET GLOBAL max_allowed_packet = 67108864, or send smaller messages"
                )
                raise MessageTooLargeError(msg)
        ids: list[int] = []
        chunk: list[NewMessage] = []
        size = 0
        for row, row_size in zip(rows, sizes, strict=True):
            if chunk and size + row_size > limit:
                ids += await self._insert_chunk(m, run, chunk)
                chunk, size = [], 0
            chunk.append(row)
            size += row_size
        if chunk:
            ids += await self._insert_chunk(m, run, chunk)
        await self._insert_keys(bind, run, rows, ids)
        return ids

    async def _insert_keys(
        self,
        bind: AsyncEngine | AsyncConnection,
        run: RunStatement,
        rows: Sequence[NewMessage],
        ids: Sequence[int],
    ) -> None:
        """The keyed messages' rows of the keys table (schema.build_keys_table), in the
        insert's transaction: a key another publisher holds fails here, and the whole
        publish with it, as the message table's own unique index would elsewhere."""
        # what makes a new message keyed (NewMessage.keyed)
        if not any_row_has(rows, "ordering_key", "idempotency_key", "channel"):
            return  # the common case: no row has a key or a channel
        keyed = [
            (message_id, row.queue, row.ordering_key, row.idempotency_key, row.channel)
            for row, message_id in zip(rows, ids, strict=True)
            if row.keyed
        ]
        if not keyed:
            return
        k = self._q(bind, self._keys)
        # a thousand rows of the longest keys stay far below any max_allowed_packet
        for start in range(0, len(keyed), KEY_ROWS_PER_INSERT):
            chunk = keyed[start : start + KEY_ROWS_PER_INSERT]
            await run(
                f"INSERT INTO {k} (id, queue, ordering_key, idempotency_key, channel) VALUES "
                + ", ".join(["(%s, %s, %s, %s, %s)"] * len(chunk)),
                tuple(value for row in chunk for value in row),
            )

    async def _insert_chunk(
        self, m: str, run: RunStatement, rows: Sequence[NewMessage]
    ) -> list[int]:
        """One multi-row INSERT built at the driver level (asyncmy interpolates
        client-side, so there is no statement cache to miss)."""
        if not self.insert_returning and not self.consecutive_ids:
            # interleaved auto-increment: only a row at a time has a knowable id
            return [i for r in rows for i in await self._insert_rows(m, run, [r])]
        return await self._insert_rows(m, run, rows)

    async def _insert_rows(
        self, m: str, run: RunStatement, rows: Sequence[NewMessage]
    ) -> list[int]:
        params: list[Any] = []
        shape = insert_shape(rows)
        for r, values in zip(rows, map(shape.values, rows), strict=True):
            params += values
            params += (r.publish_at, round(r.publish_delay * 1_000_000))
        sql = f"{_insert_head(shape).format(m=m)} {', '.join([_row(shape)] * len(rows))}"
        if self.insert_returning:
            try:
                return sorted(map(_FIRST, await run(f"{sql} RETURNING id", tuple(params))))
            except Exception as exc:
                if error_code(exc) not in READ_DENIED_CODES:
                    raise
                # A role that may insert but not read the table (docs/security.md):
                # refused before anything was written, so insert again without RETURNING.
                self.insert_returning = False
                return await self._insert_chunk(m, run, rows)
        await run(sql, tuple(params))
        # LAST_INSERT_ID() is the first id of a multi-row INSERT
        first = (await run(self._catalogue.without_tables("last_insert_id"), ()))[0][0]
        return list(range(first, first + len(rows)))

    def _transaction(
        self, engine: AsyncEngine, *, read_committed: bool = True
    ) -> DriverTransaction:
        return DriverTransaction(
            engine, read_committed=read_committed, disconnect_codes=DISCONNECT_CODES
        )

    async def claim(self, engine: AsyncEngine, queue: str, limit: int) -> list[ClaimedMessage]:
        stmt = self._on_driver.get(
            "claim", engine.dialect, lambda: self._lock_ready, CLAIM_PARAMETERS
        )
        async with self._transaction(engine) as transaction:
            cursor = transaction.cursor
            await cursor.execute(
                stmt.sql, stmt.arguments({"claim_queue": queue, "claim_limit": limit})
            )
            locked: list[Sequence[Any]] = list(await cursor.fetchall() or ())
            if not locked:
                return []
            # A driver-level IN list: SQLAlchemy's expanding parameter cost more
            # than the statement for a thousand ids.
            await cursor.execute(
                _mark_processing_sql(self._q(engine, self.tables.message), len(locked)),
                (locked[0][_ACQUIRED], *map(_FIRST, locked)),
            )
        claimed = self.read_claimed(locked)  # CLAIMED_COLUMNS as they now stand
        # in claim order whatever order the server streamed them in (see _lock_ready)
        sort_in_claim_order(claimed)
        return claimed

    def _statements(
        self, engine: AsyncEngine
    ) -> tuple[DriverStatement, DriverStatement, DriverStatement, DriverStatement]:
        """The statements of _apply_outcome_statements."""

        def outcome_text(name: str) -> sa.TextClause:
            return sa.text(self._outcome_sql(engine)[name])

        archive, delete, delete_keyed, requeue = (
            self._on_driver.get(
                name,
                engine.dialect,
                functools.partial(outcome_text, name),
                ("outcomes",),
            )
            for name in ("archive", "delete", "delete_keyed", "requeue")
        )
        return archive, delete, delete_keyed, requeue

    def _outcome_sql(self, engine: AsyncEngine) -> dict[str, str]:
        # Text, not Core: JSON_TABLE as a join source has no Core construct. The outcome
        # rows drive the join and each finds its message by primary key (STRAIGHT_JOIN,
        # FORCE INDEX): left to itself the optimizer scanned the whole table with locking
        # reads, waiting on every row an open outbox transaction had just inserted.
        # The archive's copy follows the archive's columns, so it is built here; the
        # others are in queries.sql.
        m = self._q(engine, self.tables.message)
        a = self._q(engine, self.tables.archive)
        match = f"m.id = o.id AND m.{TOKEN_COLUMN} = o.token AND m.state = 'PROCESSING'"
        columns, values = archive_copy(
            {
                "state": _STATE,
                "attempts_count": "o.attempts",
                "first_attempt_at": _time("first_us"),
                "last_attempt_at": _time("last_us"),
                "last_error": "COALESCE(o.error, m.last_error)",
            }
        )
        archive = f"""
INSERT INTO {a} ({", ".join(columns)}, archived_at)
SELECT {", ".join(values)}, UTC_TIMESTAMP(6)
FROM {_OUTCOME_ROWS} STRAIGHT_JOIN {m} AS m FORCE INDEX (PRIMARY) ON {match}
WHERE {_ARCHIVED}"""
        return {
            "archive": archive,
            "delete": self._sql(engine, "delete_settled"),
            "delete_keyed": self._sql(engine, "delete_settled_keyed"),
            "requeue": self._sql(engine, "requeue"),
        }

    async def write_outcomes(self, engine: AsyncEngine, outcomes: Sequence[Outcome]) -> int:
        statements = self._statements(engine)
        async with self._transaction(engine) as transaction:
            cursor = transaction.cursor
            return await _apply_outcome_statements(cursor, statements, outcomes)

    async def extend_leases(self, engine: AsyncEngine, leases: Sequence[tuple[int, int]]) -> int:
        renew = self._on_driver.get(
            "renew",
            engine.dialect,
            lambda: sa.text(self._sql(engine, "extend_leases")),
            ("leases",),
        )
        async with self._transaction(engine) as transaction:
            cursor = transaction.cursor
            args = renew.arguments({"leases": leases_document(leases)})
            return await cursor.execute(renew.sql, args) or 0

    def listener(
        self,
        engine: AsyncEngine,
        hooks: WakeupHooks,
    ) -> MySQLWatcher:
        per_call = {
            "newest_message": (),
            "new_messages": ("after", "most"),
            "late_and_new_messages": ("missing", "after", "most"),
        }
        statements = {
            name: self._on_driver.get(
                ("watch", name), engine.dialect, functools.partial(self._text, engine, name), args
            )
            for name, args in per_call.items()
        }
        return MySQLWatcher(
            engine,
            statements,
            hooks,
            # the missing ids travel as a JSON_TABLE: without it, polling finds them
            late_commits=self.json_table,
            due_statement=functools.partial(self._due_statement, engine),
        )

    def _due_statement(self, engine: AsyncEngine, queues: tuple[str, ...]) -> DriverStatement:
        return self._on_driver.get(
            ("watch", "due", queues),
            engine.dialect,
            lambda: queues_with_due_messages(self.tables, queues),
            (),
        )

    def _text(self, engine: AsyncEngine, name: str) -> sa.TextClause:
        return sa.text(self._sql(engine, name))

    @asynccontextmanager
    async def _bound_reads(self, conn: AsyncConnection, seconds: float) -> AsyncIterator[None]:
        await conn.execute(sa.text(self._sql(conn, "bound_read")), {"seconds": seconds})
        try:
            yield
        finally:
            try:
                await conn.execute(sa.text(self._sql(conn, "unbound_read")))
            except sa.exc.DBAPIError:
                # a connection that cannot take the setting back must not serve a write
                await conn.invalidate()

    def is_read_timeout(self, exc: BaseException) -> bool:
        return error_code(exc) == STATEMENT_TIME_EXCEEDED

    def is_transient(self, exc: BaseException) -> bool:
        return error_code(exc) in TRANSIENT_CODES

    def is_disconnect(self, exc: BaseException) -> bool:
        return bool(getattr(exc, "connection_invalidated", False)) or (
            error_code(exc) in DISCONNECT_CODES
        )
