"""PostgreSQL: one statement per claim and per outcome batch, NOTIFY for wake-ups."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from faststream_sqla.clock import utc_now
from faststream_sqla.schema import MessageState, QueueTables

from ._claim import claimed_columns, ready_ids
from .base import Dialect, Outcome, leases_document, outcomes_document, sqlstate

TRANSIENT_SQLSTATES = {"40001", "40P01", "55P03"}


class PostgresDialect(Dialect):
    name = "postgresql"
    supports_notifications = True

    def __init__(self, tables: QueueTables) -> None:
        super().__init__(tables)
        m = tables.message
        ready = ready_ids(m).with_for_update(skip_locked=True).cte("ready")
        self._claim = (
            sa.update(m)
            .where(m.c.id.in_(sa.select(ready.c.id)))
            .values(
                state=MessageState.PROCESSING,
                deliveries_count=m.c.deliveries_count + 1,
                acquired_at=utc_now(),
            )
            .returning(*claimed_columns(m))
        )
        self._outcomes_sql: str | None = None

    async def claim(self, engine: AsyncEngine, queue: str, limit: int) -> list[sa.RowMapping]:
        async with engine.begin() as conn:
            result = await conn.execute(self._claim, {"claim_queue": queue, "claim_limit": limit})
            rows = list(result.mappings())
        rows.sort(key=lambda r: (r["next_attempt_at"], r["id"]))
        return rows

    def _outcomes_statement(self, engine: AsyncEngine) -> sa.TextClause:
        # Text, not Core: DELETE ... USING ... RETURNING feeding an INSERT in one
        # statement is beyond what Core composes. Identifiers come from our tables.
        if self._outcomes_sql is None:
            m = self._q(engine, self.tables.message)
            a = self._q(engine, self.tables.archive)
            self._outcomes_sql = f"""
WITH o AS (
    SELECT * FROM jsonb_to_recordset(CAST(:outcomes AS jsonb)) AS o(
        id bigint, token int, state text, attempts int, deliveries int,
        first_at timestamp, last_at timestamp, next_at timestamp, error text)
),
moved AS (
    DELETE FROM {m} AS m USING o
    WHERE m.id = o.id AND m.deliveries_count = o.token AND m.state = 'PROCESSING'
      AND o.state IN ('COMPLETED', 'FAILED')
    RETURNING m.id, m.queue, m.headers, m.payload, o.state, o.attempts, m.deliveries_count,
              m.created_at, o.first_at, o.last_at, COALESCE(o.error, m.last_error),
              m.correlation_id
),
archived AS (
    INSERT INTO {a} (id, queue, headers, payload, state, attempts_count, deliveries_count,
                     created_at, first_attempt_at, last_attempt_at, last_error,
                     correlation_id, archived_at)
    SELECT moved.*, (now() AT TIME ZONE 'UTC') FROM moved
    RETURNING 1
),
requeued AS (
    UPDATE {m} AS m SET state = o.state, attempts_count = o.attempts,
        deliveries_count = o.deliveries, first_attempt_at = o.first_at,
        last_attempt_at = o.last_at,
        next_attempt_at = COALESCE(o.next_at, m.next_attempt_at),
        last_error = COALESCE(o.error, m.last_error), acquired_at = NULL
    FROM o
    WHERE m.id = o.id AND m.deliveries_count = o.token AND m.state = 'PROCESSING'
      AND o.state IN ('PENDING', 'RETRYABLE')
    RETURNING 1
)
SELECT (SELECT count(*) FROM archived) + (SELECT count(*) FROM requeued)
"""
        return sa.text(self._outcomes_sql)

    async def write_outcomes(self, engine: AsyncEngine, outcomes: Sequence[Outcome]) -> int:
        stmt = self._outcomes_statement(engine)
        async with engine.begin() as conn:
            result = await conn.execute(stmt, {"outcomes": outcomes_document(outcomes)})
            return int(result.scalar_one())

    async def extend_leases(self, engine: AsyncEngine, leases: Sequence[tuple[int, int]]) -> int:
        m = self._q(engine, self.tables.message)
        stmt = sa.text(
            f"UPDATE {m} AS m SET acquired_at = (now() AT TIME ZONE 'UTC') "
            "FROM jsonb_to_recordset(CAST(:leases AS jsonb)) AS o(id bigint, token int) "
            "WHERE m.id = o.id AND m.deliveries_count = o.token AND m.state = 'PROCESSING'"
        )
        async with engine.begin() as conn:
            result = await conn.execute(stmt, {"leases": leases_document(leases)})
            return result.rowcount or 0

    def is_transient(self, exc: BaseException) -> bool:
        return sqlstate(exc) in TRANSIENT_SQLSTATES

    def is_disconnect(self, exc: BaseException) -> bool:
        return bool(getattr(exc, "connection_invalidated", False)) or (
            (sqlstate(exc) or "").startswith("08")
        )
