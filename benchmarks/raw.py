"""The raw-driver ceiling: the least work any database queue must do per message.

One connection, the driver alone (asyncpg, asyncmy, sqlite3), tables with our columns and
indexes (``raw_message``, ``raw_message_archive``), batches of 1000:

- publish: one multi-row ``INSERT ... VALUES`` per batch, committed;
- claim+archive: claim a batch (``FOR UPDATE SKIP LOCKED`` on the servers,
  ``UPDATE ... RETURNING`` on SQLite) in one transaction, then move it to the archive
  (insert + delete) in a second one, as a broker must;
- end to end: insert, claim and archive each batch in turn, starting empty;
- single publish: one row per transaction, sequentially (the shape of ``publish()``).
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla.schema import build_archive_table, build_message_table

from .common import JSON_HEADERS, QUEUE, Results, Target, driver_params, rate, sqlite_path

BATCH = 1000
MSG, ARCH = "raw_message", "raw_message_archive"
# Every raw row has priority 0, and each claim says so: the claim index leads with
# (queue, priority), and the raw ceiling is one range of it, as our claim's is per level.
INSERT_COLUMNS = (
    "queue, headers, payload, state, attempts_count, deliveries_count, created_at, "
    "next_attempt_at"
)
CLAIM_COLUMNS = (
    "id, queue, headers, payload, attempts_count, deliveries_count, created_at, "
    "next_attempt_at, acquired_at, correlation_id"
)
ARCHIVE_COLUMNS = (
    "id, queue, headers, payload, state, attempts_count, deliveries_count, created_at, "
    "first_attempt_at, last_attempt_at, last_error, correlation_id, archived_at"
)


async def create_raw_tables(url: str) -> None:
    """Our columns and indexes under other names, created from our table builders."""
    md = sa.MetaData()
    build_message_table(md, MSG)
    build_archive_table(md, ARCH)
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(md.drop_all)
            await conn.run_sync(md.create_all)
    finally:
        await engine.dispose()


def payloads(start: int, count: int) -> list[bytes]:
    return [str(i).encode() for i in range(start, start + count)]


# -- PostgreSQL (asyncpg) ---------------------------------------------------------------
PG_NOW = "(now() AT TIME ZONE 'UTC')"


class PgRaw:
    def __init__(self, conn: Any) -> None:
        self.conn = conn
        # Array parameters: one cached plan for any batch, 3.5x the rate of a 3000-parameter
        # VALUES list here (that form is measured too, as `values_form_msg_per_s`).
        self.insert_batch = (
            f"INSERT INTO {MSG} ({INSERT_COLUMNS}) "
            f"SELECT q, h::json, p, 'PENDING', 0, 0, {PG_NOW}, {PG_NOW} "
            "FROM unnest($1::text[], $2::text[], $3::bytea[]) AS t(q, h, p)"
        )
        values = ", ".join(
            f"(${3 * i + 1}, ${3 * i + 2}::json, ${3 * i + 3}, 'PENDING', 0, 0, {PG_NOW}, {PG_NOW})"
            for i in range(BATCH)
        )
        self.insert_values = f"INSERT INTO {MSG} ({INSERT_COLUMNS}) VALUES {values}"
        self.insert_one = (
            f"INSERT INTO {MSG} ({INSERT_COLUMNS}) "
            f"VALUES ($1, $2::json, $3, 'PENDING', 0, 0, {PG_NOW}, {PG_NOW})"
        )
        self.claim = f"""
WITH ready AS (
  SELECT id FROM {MSG}
  WHERE queue = $1 AND priority = 0 AND state IN ('PENDING', 'RETRYABLE')
    AND next_attempt_at <= {PG_NOW}
  ORDER BY next_attempt_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
UPDATE {MSG} AS m SET state = 'PROCESSING', deliveries_count = m.deliveries_count + 1,
       acquired_at = {PG_NOW}
FROM ready WHERE m.id = ready.id
RETURNING m.{CLAIM_COLUMNS.replace(', ', ', m.')}"""
        self.archive = f"""
WITH moved AS (DELETE FROM {MSG} WHERE id = ANY($1::bigint[]) RETURNING *)
INSERT INTO {ARCH} ({ARCHIVE_COLUMNS})
SELECT id, queue, headers, payload, 'COMPLETED', attempts_count + 1, deliveries_count,
       created_at, acquired_at, acquired_at, NULL, correlation_id, {PG_NOW} FROM moved"""

    async def insert(self, start: int, count: int) -> None:
        async with self.conn.transaction():
            await self.conn.execute(
                self.insert_batch, [QUEUE] * count, [JSON_HEADERS] * count, payloads(start, count)
            )

    async def insert_values_form(self, start: int, count: int) -> None:
        args: list[Any] = []
        for p in payloads(start, count):
            args += (QUEUE, JSON_HEADERS, p)
        async with self.conn.transaction():
            await self.conn.execute(self.insert_values, *args)

    async def insert_single(self, i: int) -> None:
        await self.conn.execute(self.insert_one, QUEUE, JSON_HEADERS, str(i).encode())

    async def claim_and_archive(self, limit: int) -> int:
        async with self.conn.transaction():
            rows = await self.conn.fetch(self.claim, QUEUE, limit)
        if rows:
            async with self.conn.transaction():
                await self.conn.execute(self.archive, [r["id"] for r in rows])
        return len(rows)

    async def close(self) -> None:
        await self.conn.close()


async def pg_raw(url: str) -> PgRaw:
    import asyncpg

    p = driver_params(url)
    conn = await asyncpg.connect(
        host=p["host"], port=p["port"], user=p["user"], password=p["password"] or None,
        database=p["database"],
    )
    return PgRaw(conn)


# -- MariaDB / MySQL (asyncmy) ----------------------------------------------------------
MY_NOW = "UTC_TIMESTAMP(6)"


class MyRaw:
    def __init__(self, conn: Any) -> None:
        self.conn = conn
        row = f"(%s, %s, %s, 'PENDING', 0, 0, {MY_NOW}, {MY_NOW})"
        self.insert_batch = f"INSERT INTO {MSG} ({INSERT_COLUMNS}) VALUES " + ", ".join(
            [row] * BATCH
        )
        self.insert_one = f"INSERT INTO {MSG} ({INSERT_COLUMNS}) VALUES {row}"
        self.lock = (
            f"SELECT {CLAIM_COLUMNS} FROM {MSG} "
            "WHERE queue = %s AND priority = 0 AND state IN ('PENDING', 'RETRYABLE') "
            f"AND next_attempt_at <= {MY_NOW} "
            "ORDER BY next_attempt_at, id LIMIT %s FOR UPDATE SKIP LOCKED"
        )

    async def _execute(self, sql: str, args: Any = None) -> list[Any]:
        async with self.conn.cursor() as cur:
            await cur.execute(sql, args)
            return list(await cur.fetchall())

    async def insert(self, start: int, count: int) -> None:
        args: list[Any] = []
        for p in payloads(start, count):
            args += (QUEUE, JSON_HEADERS, p)
        await self._execute(self.insert_batch, args)
        await self.conn.commit()

    async def insert_single(self, i: int) -> None:
        await self._execute(self.insert_one, (QUEUE, JSON_HEADERS, str(i).encode()))
        await self.conn.commit()

    async def claim_and_archive(self, limit: int) -> int:
        rows = await self._execute(self.lock, (QUEUE, limit))
        if not rows:
            await self.conn.commit()
            return 0
        ids = ",".join(str(r[0]) for r in rows)  # integers from the database
        await self._execute(
            f"UPDATE {MSG} SET state = 'PROCESSING', deliveries_count = deliveries_count + 1, "
            f"acquired_at = {MY_NOW} WHERE id IN ({ids})"
        )
        await self.conn.commit()
        await self._execute(
            f"INSERT INTO {ARCH} ({ARCHIVE_COLUMNS}) "
            "SELECT id, queue, headers, payload, 'COMPLETED', attempts_count + 1, "
            "deliveries_count, created_at, acquired_at, acquired_at, NULL, correlation_id, "
            f"{MY_NOW} FROM {MSG} WHERE id IN ({ids})"
        )
        await self._execute(f"DELETE FROM {MSG} WHERE id IN ({ids})")
        await self.conn.commit()
        return len(rows)

    async def close(self) -> None:
        self.conn.close()


async def my_raw(url: str) -> MyRaw:
    import asyncmy

    p = driver_params(url)
    conn = await asyncmy.connect(
        host=p["host"], port=p["port"] or 3306, user=p["user"], password=p["password"],
        database=p["database"], autocommit=False,
    )
    async with conn.cursor() as cur:
        # As our claim does: no gap locks.
        await cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    return MyRaw(conn)


# -- SQLite (sqlite3) -------------------------------------------------------------------
LITE_NOW = "(strftime('%Y-%m-%d %H:%M:%f', 'now') || '000')"


class LiteRaw:
    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")  # as our broker sets it
        self.conn.execute("PRAGMA busy_timeout = 30000")
        row = f"(?, ?, ?, 'PENDING', 0, 0, {LITE_NOW}, {LITE_NOW})"
        self.insert_batch = f"INSERT INTO {MSG} ({INSERT_COLUMNS}) VALUES " + ", ".join(
            [row] * BATCH
        )
        self.insert_one = f"INSERT INTO {MSG} ({INSERT_COLUMNS}) VALUES {row}"
        self.claim = (
            f"UPDATE {MSG} SET state = 'PROCESSING', deliveries_count = deliveries_count + 1, "
            f"acquired_at = {LITE_NOW} WHERE id IN (SELECT id FROM {MSG} WHERE queue = ? "
            f"AND priority = 0 AND state IN ('PENDING', 'RETRYABLE') AND next_attempt_at <= {LITE_NOW} "
            f"ORDER BY next_attempt_at, id LIMIT ?) RETURNING {CLAIM_COLUMNS}"
        )

    async def insert(self, start: int, count: int) -> None:
        args: list[Any] = []
        for p in payloads(start, count):
            args += (QUEUE, JSON_HEADERS, p)
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        c.execute(self.insert_batch, args)
        c.execute("COMMIT")

    async def insert_single(self, i: int) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        c.execute(self.insert_one, (QUEUE, JSON_HEADERS, str(i).encode()))
        c.execute("COMMIT")

    async def claim_and_archive(self, limit: int) -> int:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        rows = c.execute(self.claim, (QUEUE, limit)).fetchall()
        c.execute("COMMIT")
        if not rows:
            return 0
        ids = ",".join(str(r[0]) for r in rows)
        c.execute("BEGIN IMMEDIATE")
        c.execute(
            f"INSERT INTO {ARCH} ({ARCHIVE_COLUMNS}) "
            "SELECT id, queue, headers, payload, 'COMPLETED', attempts_count + 1, "
            "deliveries_count, created_at, acquired_at, acquired_at, NULL, correlation_id, "
            f"{LITE_NOW} FROM {MSG} WHERE id IN ({ids})"
        )
        c.execute(f"DELETE FROM {MSG} WHERE id IN ({ids})")
        c.execute("COMMIT")
        return len(rows)

    async def close(self) -> None:
        self.conn.close()


async def open_raw(target: Target) -> PgRaw | MyRaw | LiteRaw:
    if target.database == "postgresql":
        return await pg_raw(target.url)
    if target.database == "mysql":
        return await my_raw(target.url)
    return LiteRaw(sqlite_path(target.url))


async def clear_raw(url: str) -> None:
    from .common import clear_tables

    await clear_tables(url, MSG, ARCH)


async def run_raw(target: Target, n: int, n_single: int, results: Results) -> None:
    """Publish, claim+archive, end to end and single-row publish ceilings."""
    db = target.database
    n = max(BATCH, n // BATCH * BATCH)
    await create_raw_tables(target.url)
    raw = await open_raw(target)
    try:
        # warm-up: statement preparation, caches
        await raw.insert(0, BATCH)
        while await raw.claim_and_archive(BATCH):
            pass
        await clear_raw(target.url)

        t0 = time.perf_counter()
        for start in range(0, n, BATCH):
            await raw.insert(start, BATCH)
        publish = rate(n, time.perf_counter() - t0)

        t0 = time.perf_counter()
        done = 0
        while (got := await raw.claim_and_archive(BATCH)) > 0:
            done += got
        claim = rate(done, time.perf_counter() - t0)
        assert done == n, f"raw claim took {done} of {n}"
        await clear_raw(target.url)

        t0 = time.perf_counter()
        for start in range(0, n, BATCH):
            await raw.insert(start, BATCH)
            await raw.claim_and_archive(BATCH)
        e2e = rate(n, time.perf_counter() - t0)
        await clear_raw(target.url)

        t0 = time.perf_counter()
        for i in range(n_single):
            await raw.insert_single(i)
        single = rate(n_single, time.perf_counter() - t0)

        values_form = None
        if isinstance(raw, PgRaw):
            await raw.insert_values_form(0, BATCH)  # prepare
            m = max(BATCH, n // 5 // BATCH * BATCH)
            t0 = time.perf_counter()
            for start in range(0, m, BATCH):
                await raw.insert_values_form(start, BATCH)
            values_form = rate(m, time.perf_counter() - t0)
    finally:
        await raw.close()
        await clear_raw(target.url)

    driver = {"postgresql": "asyncpg", "mysql": "asyncmy", "sqlite": "sqlite3"}[db]
    common = {"driver": driver, "batch": BATCH}
    form = (
        {"insert_form": "unnest arrays", "values_form_msg_per_s": values_form}
        if values_form
        else {}
    )
    results.add("raw", "raw", "publish_msg_per_s", db, publish, "msg/s", n=n, **common, **form)
    results.add("raw", "raw", "claim_archive_msg_per_s", db, claim, "msg/s", n=n, **common)
    results.add("raw", "raw", "e2e_msg_per_s", db, e2e, "msg/s", n=n, **common)
    results.add(
        "raw", "raw", "publish_single_msg_per_s", db, single, "msg/s", n=n_single, driver=driver
    )
