"""PostgreSQL: one statement per claim and per outcome batch, NOTIFY for wake-ups.

- The claim: one `LATERAL` range per priority under `FOR UPDATE SKIP LOCKED`, the
  `UPDATE` to PROCESSING, and the rows back as one row of column arrays, in one
  statement that also turns `synchronous_commit` off for its own transaction (a claim
  lost in a crash only means a repeat delivery), unless the server has a synchronous
  standby (`PostgresDriver.claim_commit`).
- The outcome write: each column one text array (`array_literal`), unnested; archived
  rows by `DELETE ... RETURNING` feeding the archive's `INSERT`, requeues by `UPDATE`,
  either half left out when the batch has none.
- The insert: what a run of rows shares as scalars, the rest as arrays that `unnest`
  turns back into rows, `pg_notify` in the same statement.
- Lease renewal, release-stuck, the first message of each ordering key, the vacuum and
  the snapshot horizon, `PostgresListener`, and the channel claim's session.

The claim, the outcome write, the committed insert and the channel claim's write run
in autocommit on the pool's asyncpg connection (`_asyncpg`, `_compiled`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import operator
import uuid
from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.clock import micros_since_epoch, utc_now
from faststream_sqla.message import ClaimedMessage
from faststream_sqla.schema import (
    CLAIM_COUNTERS,
    INSERTED_COLUMNS,
    PRIORITIES,
    PUBLISHED_COLUMNS,
    PUBLISHED_DEFAULTS,
    Initial,
    MessageColumn,
    MessageState,
    QueueTables,
    archive_copy,
)

from .._claim import CLAIM_PARAMETERS, claim_limit, claimed_columns, ready_ids, state_literal
from .._compiled import DriverStatement, DriverStatements
from .._pool import check_in
from ..base import (
    CLAIM_ORDER_POSITIONS,
    CLAIMED_COLUMNS,
    SHARED_CLAIM_COLUMNS,
    TERMINAL,
    TOKEN_COLUMN,
    Driver,
    NewMessage,
    NotificationListener,
    Outcome,
    SnapshotHolder,
    WakeupHooks,
    attempt_micros,
    claim_order,
    sqlstate,
)
from ._asyncpg import driver_connection
from .channel_claim import PostgresChannelClaim


def array_literal(values: Sequence[int | str | None]) -> str:
    """Integers (or bare words) as PostgreSQL's text form of an array, None as NULL.

    Outcome columns travel this way, not as lists: asyncpg checks every element of a
    list against collections.abc to look for nested arrays, and those checks were a
    visible share of the consume loop's own CPU (docs/benchmarks.md#postgresql-outcomes).
    Only values that need no quoting may come here.
    """
    return "{" + ",".join(map(str, values)).replace("None", "NULL") + "}"


def outcome_parameters(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The outcome statement's parameters: a text array per column, times as
    microseconds since 1970, and the errors as a list only when there are any."""
    first_us, last_us = attempt_micros(outcomes)
    # lists and a count in C, where any() over a generator resumed it once per outcome
    next_at = [o.next_attempt_at for o in outcomes]
    errors = [o.last_error for o in outcomes]
    return {
        "ids": array_literal([o.id for o in outcomes]),
        "tokens": array_literal([o.token for o in outcomes]),
        # MessageState is a str: joined as it is, without a property call per outcome
        "states": "{" + ",".join([o.state for o in outcomes]) + "}",
        "attempts": array_literal([o.attempts_count for o in outcomes]),
        "deliveries": array_literal([o.deliveries_count for o in outcomes]),
        "first_us": array_literal(first_us),
        "last_us": array_literal(last_us),
        # unnest pads a NULL array with NULLs: no array at all in the common cases, an
        # acknowledged batch (no retry times) and one without errors
        "next_us": (
            array_literal([micros_since_epoch(at) for at in next_at])
            if next_at.count(None) != len(next_at)
            else None
        ),
        "errors": errors if errors.count(None) != len(errors) else None,
    }


#: published columns sent once per run of rows sharing them, and those sent as an array
#: with a value per row
_SHARED = tuple(c for c in PUBLISHED_COLUMNS if c.shared)
_PER_ROW = tuple(c for c in PUBLISHED_COLUMNS if not c.shared)
_SHARED_NAMES = tuple(c.name for c in _SHARED)
_shared_values = operator.attrgetter(*(c.published_attribute for c in _SHARED))
_NO_DEFAULT = object()
#: per column: its parameter's name, the value that means "option unused" (else
#: _NO_DEFAULT), and how to read it from a message
_PER_ROW_PARAMETERS = tuple(
    (
        f"{c.name}_values",
        PUBLISHED_DEFAULTS.get(c.name, _NO_DEFAULT),
        operator.attrgetter(c.published_attribute),
    )
    for c in _PER_ROW
)
#: every per-row value of one message at once (a single publish reads them so)
_per_row_values = operator.attrgetter(*(c.published_attribute for c in _PER_ROW))
assert len(_PER_ROW) > 1, "attrgetter of one name returns a value, not a tuple"
INSERT_PARAMETERS = (
    *(c.name for c in _SHARED),
    "publish_at",
    "delay",
    *(f"{c.name}_values" for c in _PER_ROW),
    "channel",
    "notify_queue",
)
OUTCOME_PARAMETERS = (
    "ids",
    "tokens",
    "states",
    "attempts",
    "deliveries",
    "first_us",
    "last_us",
    "next_us",
    "errors",
)


def _from_micros(column: str) -> str:
    return f"TIMESTAMP '1970-01-01' + u.{column} * INTERVAL '1 microsecond'"


TRANSIENT_SQLSTATES = {"40001", "40P01", "55P03"}
#: a statement cancelled, here by the statement_timeout of a bounded read
QUERY_CANCELED = "57014"

# "Still claimed" for a message `m` matched to an outcome or lease `o` by id and token:
# acquired_at is set by a claim and cleared by every release and outcome (the same rows
# as state = 'PROCESSING'). Written against `m` alone, the planner estimated it from the
# column's statistics, and statistics gathered while nothing was in flight say no row
# matches: it then scanned the whole table as the outer side and rescanned the outcome
# list for every row, quadratic in the batch (docs/benchmarks.md#postgresql-outcomes).
# The `OR o.id IS NULL` (never true: o.id is an outcome's key) makes it a join
# condition, so the table is estimated whole and each outcome finds its row by primary
# key. A state test is no better: it matched the PROCESSING partial index, with the
# same wrong estimate.
STILL_CLAIMED = "(m.acquired_at IS NOT NULL OR o.id IS NULL)"


@asynccontextmanager
async def autocommit(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection on which each statement is its own transaction: a one-statement
    operation costs one round trip, with no BEGIN and COMMIT around it."""
    async with engine.connect() as conn:
        yield await conn.execution_options(isolation_level="AUTOCOMMIT")


def _runs_sharing_options(rows: Sequence[NewMessage]) -> list[Sequence[NewMessage]]:
    """Consecutive rows with the same queue, headers and due time, in order. A
    publish_batch is one run; rows of other shapes stay in order across runs."""
    runs: list[Sequence[NewMessage]] = []
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or not _same_options(rows[i], rows[start]):
            runs.append(rows[start:i])
            start = i
    return runs


def _same_options(a: NewMessage, b: NewMessage) -> bool:
    return (
        _shared_values(a) == _shared_values(b)
        and a.publish_at == b.publish_at
        and a.publish_delay == b.publish_delay
    )


def rows_from_columns(columns: Sequence[Sequence[Any]]) -> list[Sequence[Any]]:
    """A claim's column arrays (CLAIMED_COLUMNS order) as rows, oldest first.

    An aggregate over a sorted subquery takes the rows in that order in practice, but
    PostgreSQL does not promise it: the order is checked (cheap) and restored if it
    ever differs.
    """
    rows: list[Sequence[Any]] = list(zip(*columns, strict=True))
    priority, due, ids = (columns[i] for i in CLAIM_ORDER_POSITIONS)
    # claim_order, from the arrays
    keys = list(zip(map(operator.neg, priority), due, ids, strict=True))
    if not all(map(operator.le, keys, itertools.islice(keys, 1, None))):
        rows.sort(key=claim_order)
    return rows


#: what the plain claim's rows share, filled on the client: the queue and the claim's
#: time (SHARED_CLAIM_COLUMNS), and the channel, always NULL there (channels.claim
#: takes channelled messages): an array of a thousand NULLs per claim is decoded for
#: nothing
CLIENT_FILLED = (*SHARED_CLAIM_COLUMNS, "channel")


class PostgresDriver(Driver):
    name = "postgresql"
    channel_claim_type = PostgresChannelClaim
    needs_vacuum = True
    relaxes_commits = True
    queries_package = "faststream_sqla.drivers.postgresql"

    @staticmethod
    def claim_commit() -> sa.ColumnElement[str]:
        """The claim's `synchronous_commit`, decided by the server at each claim.

        Without a synchronous standby a lost claim only means a repeat delivery (a
        crash), so the claim's commit does not wait for its WAL flush. With one
        (`synchronous_standby_names` set), the claim keeps the session's setting (`on`
        unless the operator chose otherwise) and so reaches the standby before it
        returns: a failover to that standby then forgets no claim, and a message handled
        before it is not delivered again. Read per claim, it follows a failover or a
        change of the server's configuration without a restart."""
        return sa.case(
            (sa.func.current_setting("synchronous_standby_names") == "", "off"),
            else_=sa.func.current_setting("synchronous_commit"),
        )

    def __init__(self, tables: QueueTables) -> None:
        super().__init__(tables)
        m = tables.message
        # Each priority's ready rows, highest priority first, stopping at the limit: a
        # lateral subquery per level, run in the order of the VALUES list and pulled
        # row by row, so the levels past the limit are never read or locked.
        levels = sa.values(
            sa.column("level", sa.SmallInteger()), name="levels", literal_binds=True
        ).data([(level,) for level in PRIORITIES])
        per_level = (
            ready_ids(tables, levels.c.level)
            .with_for_update(skip_locked=True)
            .lateral("level_ready")
        )
        ready = (
            sa.select(per_level.c.id)
            .select_from(levels.join(per_level, sa.true()))
            .limit(claim_limit())
            .cte("ready")
        )
        # Set inside the statement itself, so the claim stays one round trip.
        relaxed = sa.select(
            sa.func.set_config("synchronous_commit", self.claim_commit(), True)
        ).cte("relaxed")
        # `id = ANY(ARRAY(ready ids))`: one pass over the primary key for the whole
        # batch. `id IN (SELECT ...)` planned a semi-join that first de-duplicated the
        # ids in a hash table (a share of the claim's server time); a join with `ready`
        # avoided that but fell to a full scan under a generic plan (see the tests).
        ready_array = sa.func.array(sa.select(ready.c.id).scalar_subquery())
        claimed = (
            sa.update(m)
            .where(m.c.id == sa.any_(ready_array), sa.exists(sa.select(relaxed)))
            .values(
                state=state_literal(MessageState.PROCESSING),
                **{name: m.c[name] + 1 for name in CLAIM_COUNTERS},
                acquired_at=utc_now(),
            )
            .returning(*claimed_columns(m, headers_as_text=True))
            .cte("claimed")
        )
        # The claimed rows come back as one row of column arrays, in claim order: asyncpg
        # decodes an array far cheaper than a record per row. The rows are sorted once,
        # below the aggregates: an ORDER BY inside each of the twelve array_aggs was a
        # sort apiece on PostgreSQL 15 (docs/benchmarks.md#postgresql-claim).
        ordered = (
            sa.select(claimed)
            .order_by(claimed.c.priority.desc(), claimed.c.next_attempt_at, claimed.c.id)
            .subquery()
        )
        # What every row of a claim shares comes back once, not as an array of copies:
        # the queue is the one asked for, and acquired_at is now(), fixed for the
        # statement. Decoding a thousand equal strings and timestamps was client work
        # for nothing.
        self._claim = sa.select(
            *(
                sa.type_coerce(sa.func.array_agg(column), sa.types.NullType())
                for column in ordered.c
                if column.name not in CLIENT_FILLED
            ),
            sa.type_coerce(sa.func.max(ordered.c.acquired_at), sa.types.NullType()),
        )
        self._on_driver = DriverStatements()
        self._insert_sql: sa.TextClause | None = None
        # One channel per table set, so brokers on other tables are not woken.
        self.channel = f"fsqla_{tables.message.name}"

    def _claim_statement(self, engine: AsyncEngine) -> DriverStatement:
        return self._on_driver.get("claim", engine.dialect, lambda: self._claim, CLAIM_PARAMETERS)

    async def claim(self, engine: AsyncEngine, queue: str, limit: int) -> list[ClaimedMessage]:
        stmt = self._claim_statement(engine)
        async with driver_connection(engine) as conn:
            row = await conn.fetchrow(
                stmt.sql, *stmt.arguments({"claim_queue": queue, "claim_limit": limit})
            )
        *arrays, acquired_at = row
        if arrays[0] is None:  # array_agg of no rows
            return []
        shared = dict(zip(CLIENT_FILLED, (queue, acquired_at, None), strict=True))
        count = len(arrays[0])
        columns, arrays_left = [], iter(arrays)
        for name in CLAIMED_COLUMNS:
            columns.append([shared[name]] * count if name in shared else next(arrays_left))
        return self.read_claimed(rows_from_columns(columns))

    def _outcomes_statement(
        self, engine: AsyncEngine, *, archives: bool, requeues: bool
    ) -> DriverStatement:
        return self._on_driver.get(
            ("outcomes", archives, requeues),
            engine.dialect,
            lambda: self._outcomes_sql(engine, archives=archives, requeues=requeues),
            OUTCOME_PARAMETERS,
        )

    def _outcomes_sql(
        self, engine: AsyncEngine, *, archives: bool, requeues: bool
    ) -> sa.TextClause:
        # Text, not Core: DELETE ... USING ... RETURNING feeding an INSERT in one
        # statement is beyond what Core composes. Identifiers come from our tables.
        # Each outcome finds its row by key, still claimed (STILL_CLAIMED). A batch with
        # nothing to requeue (the common case) or nothing to archive leaves the other
        # half out: unnesting the arrays for it costs server time on every batch.
        m = self._q(engine, self.tables.message)
        a = self._q(engine, self.tables.archive)
        # Columns travel as arrays in text form (see array_literal), times as
        # microseconds turned back into timestamps here.
        rows = (
            "(SELECT u.id, u.token, u.state, u.attempts, u.deliveries, "
            f"{_from_micros('first_us')} AS first_at, {_from_micros('last_us')} AS last_at, "
            f"{_from_micros('next_us')} AS next_at, u.error "
            "FROM unnest(CAST(CAST(:ids AS text) AS bigint[]), "
            "CAST(CAST(:tokens AS text) AS int[]), CAST(CAST(:states AS text) AS text[]), "
            "CAST(CAST(:attempts AS text) AS int[]), "
            "CAST(CAST(:deliveries AS text) AS int[]), "
            "CAST(CAST(:first_us AS text) AS bigint[]), "
            "CAST(CAST(:last_us AS text) AS bigint[]), "
            "CAST(CAST(:next_us AS text) AS bigint[]), CAST(:errors AS text[])) "
            "AS u(id, token, state, attempts, deliveries, first_us, last_us, next_us, "
            "error)) AS o"
        )
        parts, counts = [], []
        if archives:
            columns, values = archive_copy(
                {
                    "state": "o.state",
                    "attempts_count": "o.attempts",
                    "first_attempt_at": "o.first_at",
                    "last_attempt_at": "o.last_at",
                    "last_error": "COALESCE(o.error, m.last_error)",
                }
            )
            parts.append(f"""moved AS (
    DELETE FROM {m} AS m USING {rows}
    WHERE m.id = o.id AND m.{TOKEN_COLUMN} = o.token AND {STILL_CLAIMED}
      AND o.state IN ({", ".join(f"'{s.value}'" for s in TERMINAL)})
    RETURNING {", ".join(values)}
),
archived AS (
    INSERT INTO {a} ({", ".join(columns)}, archived_at)
    SELECT moved.*, (now() AT TIME ZONE 'UTC') FROM moved
    RETURNING 1
)""")
            counts.append("(SELECT count(*) FROM archived)")
        if requeues:
            parts.append(f"""requeued AS (
    UPDATE {m} AS m SET state = o.state, attempts_count = o.attempts,
        deliveries_count = o.deliveries, first_attempt_at = o.first_at,
        last_attempt_at = o.last_at,
        next_attempt_at = COALESCE(o.next_at, m.next_attempt_at),
        last_error = COALESCE(o.error, m.last_error), acquired_at = NULL
    FROM {rows}
    WHERE m.id = o.id AND m.{TOKEN_COLUMN} = o.token AND {STILL_CLAIMED}
      AND o.state IN ('PENDING', 'RETRYABLE')
    RETURNING 1
)""")
            counts.append("(SELECT count(*) FROM requeued)")
        return sa.text(f"WITH {', '.join(parts)}\nSELECT {' + '.join(counts)}")

    async def write_outcomes(self, engine: AsyncEngine, outcomes: Sequence[Outcome]) -> int:
        if not outcomes:
            return 0
        states = {o.state for o in outcomes}
        stmt = self._outcomes_statement(
            engine,
            archives=not states.isdisjoint(TERMINAL),
            requeues=not states.issubset(TERMINAL),
        )
        args = stmt.arguments(outcome_parameters(outcomes))
        async with driver_connection(engine) as conn:
            return int(await conn.fetchval(stmt.sql, *args))

    async def first_of_keys(
        self, conn: AsyncConnection, queue: str, keys: Sequence[str]
    ) -> list[int]:
        result = await conn.execute(
            sa.text(self._sql(conn, "first_of_keys")), {"keys": list(keys), "queue": queue}
        )
        return list(result.scalars())

    def not_among(self, column: sa.ColumnElement[int], name: str) -> sa.ColumnElement[bool]:
        return column != sa.all_(sa.bindparam(name, type_=ARRAY(sa.BigInteger())))

    def id_list(self, ids: Collection[int]) -> Any:
        return list(ids)

    async def release_stuck(
        self,
        engine: AsyncEngine,
        queues: Sequence[str],
        timeout_seconds: float,
        held: Collection[int] = (),
    ) -> int:
        async with autocommit(engine) as conn:
            result = await conn.execute(
                self._release_stuck, self.release_stuck_parameters(queues, timeout_seconds, held)
            )
            return result.rowcount or 0

    async def replica_lag(self, conn: AsyncConnection) -> float | None:
        lag = await conn.scalar(sa.text(self._sql(conn, "replica_lag")))
        return float(lag)

    async def prepare(self, engine: AsyncEngine) -> None:
        # Only the table's owner, the database's owner or a superuser may vacuum it
        # (PostgreSQL 17 adds the MAINTAIN privilege); anyone else's VACUUM is skipped
        # with a warning in the server's log. A missing table (created after connect)
        # counts as allowed: the vacuum finds out then.
        m = self._q(engine, self.tables.message)
        async with engine.connect() as conn:
            # read by SQLAlchemy on the engine's first connection
            version = engine.dialect.server_version_info or (0,)
            may_vacuum = "may_vacuum_maintain" if version >= (17,) else "may_vacuum"
            row = (await conn.execute(sa.text(self._sql(engine, may_vacuum)), {"name": m})).first()
        self.vacuum_denied = (
            None
            if row is None or row[1]
            else f"the database user {row[0]!r} does not own the table {m}"
        )

    async def vacuum_message_table(self, engine: AsyncEngine) -> float:
        m = self._q(engine, self.tables.message)
        async with autocommit(engine) as conn:
            await conn.exec_driver_sql(self._sql(engine, "vacuum_message_table"))
            rows = await conn.scalar(sa.text(self._sql(engine, "estimated_rows")), {"name": m})
        return float(rows or 0)

    async def oldest_snapshot(self, engine: AsyncEngine) -> SnapshotHolder | None:
        async with autocommit(engine) as conn:
            row = (await conn.execute(sa.text(self._sql(engine, "oldest_snapshot")))).first()
        return None if row is None else SnapshotHolder(horizon=row[0], holder=row[1])

    def _lease_sql(self, engine: AsyncEngine) -> sa.TextClause:
        return sa.text(self._sql(engine, "extend_leases"))

    async def extend_leases(self, engine: AsyncEngine, leases: Sequence[tuple[int, int]]) -> int:
        if not leases:
            return 0
        async with autocommit(engine) as conn:
            ids, tokens = zip(*leases, strict=True)
            result = await conn.execute(
                self._lease_sql(engine), {"ids": list(ids), "tokens": list(tokens)}
            )
            return result.rowcount or 0

    def _insert_statement(
        self, conn: AsyncEngine | AsyncConnection, *, relaxed: bool = False
    ) -> sa.TextClause:
        # One statement shape whatever the batch size: the per-row columns travel as
        # arrays (binary-encoded by asyncpg) that unnest turns back into rows, and what a
        # run of rows shares (queue, headers, due time) travels once, as scalars.
        if relaxed:
            # fast_publish: this transaction's commit does not wait for its WAL flush,
            # set from inside the statement so the publish stays one round trip
            plain = self._insert_statement(conn).text
            return sa.text(
                f"{plain}, (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed"
            )
        if self._insert_sql is None:
            m = self._q(conn, self.tables.message)
            now = "(now() AT TIME ZONE 'UTC')"
            initial = {
                Initial.NOW: now,
                Initial.DUE: "COALESCE(CAST(:publish_at AS timestamp), "
                f"{now} + make_interval(secs => CAST(:delay AS float8)))",
            }
            pg = conn.dialect

            def sql_type(c: MessageColumn) -> str:
                # text, not VARCHAR(n): a cast to VARCHAR(n) cuts a longer value short
                # in silence, where the column itself refuses it
                return "text" if isinstance(c.type, sa.String) else c.type.compile(dialect=pg)

            def per_row(c: MessageColumn) -> str:
                # a column left at a non-NULL default by every row travels as NULL
                default = PUBLISHED_DEFAULTS.get(c.name)
                return f"t.{c.name}" if default is None else f"COALESCE(t.{c.name}, {default})"

            values = [
                f"CAST(:{c.name} AS {sql_type(c)})"
                if c.shared
                else per_row(c)
                if c.published_as
                # every column publishers do not fill has an initial value
                else initial.get(c.initial, str(c.initial))  # type: ignore[call-overload]
                for c in INSERTED_COLUMNS
            ]
            arrays = ", ".join(f"CAST(:{c.name}_values AS {sql_type(c)}[])" for c in _PER_ROW)
            # The notification rides in the same statement: heard at commit, never for a
            # rollback, and PostgreSQL folds repeats within one transaction.
            self._insert_sql = sa.text(
                f"WITH inserted AS (INSERT INTO {m} "
                f"({', '.join(c.name for c in INSERTED_COLUMNS)}) "
                f"SELECT {', '.join(values)} FROM unnest({arrays}) "
                f"AS t({', '.join(c.name for c in _PER_ROW)}) RETURNING id) "
                # one array, not a row per id: ids come from one sequence in insertion
                # order, so sorted they are in row order
                "SELECT (SELECT array_agg(id ORDER BY id) FROM inserted) AS ids "
                "FROM (SELECT pg_notify(:channel, :notify_queue)) AS notified"
            )
        return self._insert_sql

    async def insert_messages(self, conn: AsyncConnection, rows: Sequence[NewMessage]) -> list[int]:
        return await self._insert_runs(conn, _runs_sharing_options(rows))

    async def insert_committed(
        self, engine: AsyncEngine, rows: Sequence[NewMessage], *, relaxed: bool = False
    ) -> list[int]:
        # A publish outside the caller's transaction, on the driver (see _asyncpg).
        stmt = self._on_driver.get(
            "relaxed insert" if relaxed else "insert",
            engine.dialect,
            lambda: self._insert_statement(engine, relaxed=relaxed),
            INSERT_PARAMETERS,
        )
        runs = _runs_sharing_options(rows)
        ids: list[int] = []
        async with driver_connection(engine) as conn:
            # One statement is atomic by itself: no BEGIN and COMMIT around it. Rows of
            # several shapes take several statements, which must commit together.
            transaction = conn.transaction() if len(runs) > 1 else contextlib.nullcontext()
            async with transaction:
                for run in runs:
                    args = stmt.arguments(self._insert_parameters(run))
                    ids += await conn.fetchval(stmt.sql, *args)
        return ids

    async def _insert_runs(
        self, conn: AsyncConnection, runs: Sequence[Sequence[NewMessage]]
    ) -> list[int]:
        stmt = self._insert_statement(conn)
        ids: list[int] = []
        for run in runs:
            result = await conn.execute(stmt, self._insert_parameters(run))
            ids += result.scalar_one()
        return ids

    def _insert_parameters(self, run: Sequence[NewMessage]) -> dict[str, Any]:
        first = run[0]
        parameters = dict(zip(_SHARED_NAMES, _shared_values(first), strict=True))
        # An option no message of the run sets travels as NULL, not an array of
        # defaults: unnest pads a NULL array with NULLs, which the statement reads as
        # the default.
        if len(run) == 1:  # a single publish: one read of the message, no lists to scan
            for (name, default, _get), value in zip(
                _PER_ROW_PARAMETERS, _per_row_values(first), strict=True
            ):
                unused = default is not _NO_DEFAULT and value == default
                parameters[name] = None if unused else [value]
        else:
            for name, default, get in _PER_ROW_PARAMETERS:
                values = list(map(get, run))
                # list.count compares in C, without a Python-level loop
                unused = default is not _NO_DEFAULT and values.count(default) == len(values)
                parameters[name] = None if unused else values
        parameters.update(
            publish_at=first.publish_at,
            delay=first.publish_delay,
            channel=self.channel,
            notify_queue=first.queue,
        )
        return parameters

    def listener(
        self,
        engine: AsyncEngine,
        hooks: WakeupHooks,
    ) -> PostgresListener:
        # each notification names its queue: a queue no fetcher here consumes wakes none
        return PostgresListener(engine, self.channel, hooks)

    @asynccontextmanager
    async def _bound_reads(self, conn: AsyncConnection, seconds: float) -> AsyncIterator[None]:
        ms = str(max(1, round(seconds * 1000)))
        await conn.execute(sa.text(self._sql(conn, "bound_read")), {"ms": ms})
        yield  # the bound ends with the read's transaction

    def is_read_timeout(self, exc: BaseException) -> bool:
        return sqlstate(exc) == QUERY_CANCELED

    def is_transient(self, exc: BaseException) -> bool:
        return sqlstate(exc) in TRANSIENT_SQLSTATES

    def is_disconnect(self, exc: BaseException) -> bool:
        return (
            bool(getattr(exc, "connection_invalidated", False))
            or (sqlstate(exc) or "").startswith("08")
            # asyncpg's own error for a connection the server had already dropped, met
            # below SQLAlchemy (the listener's LISTEN on a pooled connection)
            or (isinstance(exc, asyncpg.InterfaceError) and "connection is closed" in str(exc))
        )


#: notifications that check the listener hears (never a queue's name: see _hears_itself)
ECHO_PREFIX = "faststream-sqla:echo:"
#: how long the check waits for its own notification before it concludes none arrive
ECHO_TIMEOUT = 10.0
#: seconds a stopping listener is given to end before it is cancelled again
STOP_RECANCEL = 1.0
DEAF_WARNING = (
    "notifications sent to PostgreSQL do not reach this broker (a connection pooler in "
    "transaction mode between them?): subscribers poll every max_fetch_interval instead; "
    "see docs/production.md#connection-poolers"
)


class PostgresListener(NotificationListener):
    """LISTENs on a connection of its own; re-listens after losing it.

    While it is down, subscribers fall back to polling at max_fetch_interval; after a
    reconnect every queue is woken once, since notifications may have been missed.
    Each connection first proves that notifications reach it (`_hears_itself`); where
    none do, the listener says so once and ends, and polling alone remains.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        channel: str,
        hooks: WakeupHooks,
    ) -> None:
        self.engine, self.channel = engine, channel
        self.on_queue, self.on_reconnect = hooks.on_queue, hooks.on_reconnect
        self.log, self.noticed = hooks.log, hooks.noticed
        self.connects = 0
        self.connected = asyncio.Event()
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self.backend_pid: int | None = None
        #: False once notifications proved not to arrive (see `_hears_itself`)
        self.hearing: bool | None = None
        self.checked = asyncio.Event()
        self._echo: tuple[str, asyncio.Event] | None = None
        self._stopping = False

    async def start(self) -> None:
        self._stopping = False
        self._task = asyncio.create_task(self._run(), name=f"faststream-sqla:listen:{self.channel}")

    async def stop(self) -> None:
        # the flag, and a cancellation repeated until the task ends: one that an await
        # inside a connect swallows must not leave stop() waiting on a listener that
        # goes on to listen
        self._stopping = True
        task, self._task = self._task, None
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=STOP_RECANCEL)
        if task is not None and not task.cancelled():
            task.exception()  # retrieved: its failure was logged where it happened

    async def wait_connects(self, count: int) -> None:
        """Wait until the listener has connected `count` times in all."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.connects >= count)

    def _notified(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        if payload.startswith(ECHO_PREFIX):  # another process's check, or ours
            if self._echo is not None and payload == self._echo[0]:
                self._echo[1].set()
            return
        self.on_queue(payload)

    async def _hears_itself(self) -> bool:
        """Whether a NOTIFY sent on another connection reaches this LISTEN.

        Behind a pooler in transaction mode (PgBouncer's `pool_mode = transaction`) the
        LISTEN succeeds on a server connection that goes back to the pool at once, and
        nothing is ever heard: the pooler drops the notifications. A connection of our
        own pool sends the echo, so it never shares the LISTEN's client connection.
        """
        token = f"{ECHO_PREFIX}{uuid.uuid4().hex}"
        self._echo = (token, asyncio.Event())
        try:
            async with self.engine.begin() as conn:
                await conn.execute(sa.select(sa.func.pg_notify(self.channel, token)))
            try:
                await asyncio.wait_for(self._echo[1].wait(), ECHO_TIMEOUT)
            except asyncio.TimeoutError:
                return False
            return True
        finally:
            self._echo = None

    async def _run(self) -> None:
        delay = 0.1
        while not self._stopping:
            raw: Any = None
            try:
                raw = await self.engine.raw_connection()
                native = raw.driver_connection
                lost = asyncio.Event()
                native.add_termination_listener(lambda _c, lost=lost: lost.set())
                await native.add_listener(self.channel, self._notified)
                self.hearing = await self._hears_itself()
                self.checked.set()
                if not self.hearing:
                    self.log(logging.WARNING, DEAF_WARNING)
                    await native.remove_listener(self.channel, self._notified)
                    await check_in(raw, transaction_ended=False)
                    return
                self.backend_pid = native.get_server_pid()
                self.connected.set()
                async with self._changed:
                    self.connects += 1
                    self._changed.notify_all()
                delay = 0.1
                self.on_reconnect()
                await lost.wait()
                self.log(logging.WARNING, "notification listener lost its connection; polling")
            except asyncio.CancelledError:
                # Stopping must not wait on the server: an UNLISTEN on a connection the
                # server is dropping can hang until TCP gives up, and the broker's close
                # with it. The connection is closed without a word instead of pooled.
                if raw is not None:
                    raw.invalidate()
                raise
            except Exception as exc:
                if not self.noticed(exc):
                    self.log(logging.WARNING, f"notification listener failed: {exc!r}; retrying")
            finally:
                self.connected.clear()
            if raw is not None:
                raw.invalidate()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
