"""The Spark pipeline against one process, on PostgreSQL: `python -m benchmarks.spark --rows 1000000`.

1. Enqueue: N rows through `publish_dataframe` on Spark `local[2]`, and the same
   messages (same JSON bodies, same idempotency keys, batches of 1000) through a
   `publish_batch` loop in this process; rows/s of each and their ratio.
2. Report: the N messages archived, `read_archive` + `delivery_report` on Spark against
   one SQL aggregate query (percentile_cont) computing the same figures; seconds each.

The database is `fsqla_bench_spark` on the benchmarks' PostgreSQL server, emptied
before each step. The machine's cores are shared with whatever else runs: figures of
one run are one reading.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from benchmarks.common import PG_SERVER, create_database
from faststream_sqla import Envelope, SqlaBroker, upgrade_schema
from faststream_sqla.spark import (
    REPORT_INPUT,
    delivery_report,
    publish_dataframe,
    read_archive,
    row_key,
    spark_session,
)

DATABASE = "fsqla_bench_spark"
URL = f"{PG_SERVER}/{DATABASE}"
QUEUE = "spark-bench"
JOB = "bench"
BATCH = 1000
CUSTOMERS = 1000

#: the same columns in Spark SQL and in Python
COLUMNS_SQL = (
    "id AS n",
    f"concat('customer-', id % {CUSTOMERS}) AS customer",
    "CAST(id % 9973 AS DOUBLE) / 100 AS amount",
)


def python_row(n: int) -> dict[str, Any]:
    return {"n": n, "customer": f"customer-{n % CUSTOMERS}", "amount": (n % 9973) / 100}


async def prepare() -> None:
    await create_database("postgresql", DATABASE)
    await upgrade_schema(URL)


async def clear() -> None:
    engine = create_async_engine(URL)
    async with engine.begin() as conn:
        await conn.exec_driver_sql("TRUNCATE message, message_archive")
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.exec_driver_sql("VACUUM ANALYZE message")
    await engine.dispose()


async def publish_loop(rows: int) -> float:
    """Seconds to publish `rows` messages from this process, batch by batch."""
    async with SqlaBroker(URL, logger=None) as broker:
        await broker.connect()
        started = time.perf_counter()
        for start in range(0, rows, BATCH):
            batch = []
            for n in range(start, min(start + BATCH, rows)):
                row = python_row(n)
                batch.append(Envelope(row, idempotency_key=row_key(QUEUE, JOB, row)))
            await broker.publish_batch(*batch, queue=QUEUE)
        return time.perf_counter() - started


async def count_messages() -> int:
    engine = create_async_engine(URL)
    async with engine.connect() as conn:
        total = await conn.scalar(sa.text("SELECT count(*) FROM message"))
    await engine.dispose()
    return int(total)


async def archive_all() -> None:
    """Settle every queued message as the consumers would: COMPLETED, but one in
    fifty FAILED after three attempts, archived 1-2000 ms after creation."""
    engine = create_async_engine(URL)
    async with engine.begin() as conn:
        await conn.exec_driver_sql(
            """
            INSERT INTO message_archive (id, queue, headers, payload, attempts_count,
                deliveries_count, created_at, first_attempt_at, last_attempt_at,
                correlation_id, claims_count, expires_at, priority, ordering_key,
                idempotency_key, state, last_error, redriven_from, archived_at)
            SELECT id, queue, headers, payload,
                CASE WHEN id % 50 = 0 THEN 3 ELSE 1 END, 1, created_at, created_at,
                created_at, correlation_id, 1, expires_at, priority, ordering_key,
                idempotency_key, CASE WHEN id % 50 = 0 THEN 'FAILED' ELSE 'COMPLETED' END,
                NULL, NULL, created_at + (1 + (id * 7919) % 2000) * interval '1 millisecond'
            FROM message
            """
        )
        await conn.exec_driver_sql("DELETE FROM message")
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.exec_driver_sql("VACUUM ANALYZE message_archive")
    await engine.dispose()


AGGREGATE = """
SELECT queue, count(*) AS messages,
    count(*) FILTER (WHERE state = 'COMPLETED') AS completed,
    count(*) FILTER (WHERE state = 'FAILED') AS failed,
    count(*) FILTER (WHERE state = 'EXPIRED') AS expired,
    count(*) FILTER (WHERE state = 'REDRIVEN') AS redriven,
    avg(attempts_count) AS mean_attempts, max(attempts_count) AS max_attempts,
    percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP
        (ORDER BY extract(epoch FROM archived_at - created_at)) AS latency,
    min(archived_at) AS first_archived_at, max(archived_at) AS last_archived_at
FROM message_archive GROUP BY queue ORDER BY queue
"""


async def sql_report() -> tuple[float, list[Any]]:
    engine = create_async_engine(URL)
    async with engine.connect() as conn:
        started = time.perf_counter()
        result = (await conn.exec_driver_sql(AGGREGATE)).all()
        seconds = time.perf_counter() - started
    await engine.dispose()
    return seconds, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--repeat", type=int, default=2,
        help="enqueue runs of each kind, alternating (the best of each is compared)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    rows: int = args.rows

    asyncio.run(prepare())
    spark = spark_session(args.master, app_name="faststream-sqla-bench", shuffle_partitions=2)
    cores = spark.sparkContext.defaultParallelism
    source = spark.range(rows, numPartitions=cores * 2).selectExpr(*COLUMNS_SQL)
    results: dict[str, Any] = {"rows": rows}
    loop_runs: list[float] = []
    spark_runs: list[float] = []
    try:
        # alternating, so a busy spell of the machine is less likely to hit one kind only
        for _ in range(args.repeat):
            asyncio.run(clear())
            loop_runs.append(asyncio.run(publish_loop(rows)))
            assert asyncio.run(count_messages()) == rows

            asyncio.run(clear())
            started = time.perf_counter()
            new = publish_dataframe(source, URL, QUEUE, job_key=JOB, batch_size=BATCH)
            spark_runs.append(time.perf_counter() - started)
            assert new == rows == asyncio.run(count_messages()), new
        loop_s, spark_s = min(loop_runs), min(spark_runs)

        asyncio.run(archive_all())
        started = time.perf_counter()
        archive = read_archive(spark, URL, columns=REPORT_INPUT)
        (report,) = delivery_report(archive).collect()
        report_s = time.perf_counter() - started
        sql_s, (aggregate,) = asyncio.run(sql_report())
        assert report.messages == aggregate.messages == rows
        assert report.failed == aggregate.failed
        assert abs(report.latency_p95_s - aggregate.latency[1]) < 1e-6
    finally:
        spark.stop()

    results.update(
        loop_runs_rows_per_s=[round(rows / s) for s in loop_runs],
        spark_runs_rows_per_s=[round(rows / s) for s in spark_runs],
        loop_rows_per_s=rows / loop_s,
        spark_rows_per_s=rows / spark_s,
        spark_over_loop=loop_s / spark_s,
        report_spark_s=report_s,
        report_sql_s=sql_s,
        report_spark_over_sql=report_s / sql_s,
    )
    if args.json:
        print(json.dumps(results))
        return
    print(f"PostgreSQL, {rows:,} rows, Spark {args.master} ({cores} cores)")
    runs = f"best of {args.repeat}"
    print(f"  enqueue, publish_batch loop in one process: {results['loop_rows_per_s']:>10,.0f} rows/s"
          f" ({runs}: {', '.join(f'{r:,}' for r in results['loop_runs_rows_per_s'])})")
    print(f"  enqueue, publish_dataframe on Spark:        {results['spark_rows_per_s']:>10,.0f} rows/s"
          f" ({runs}: {', '.join(f'{r:,}' for r in results['spark_runs_rows_per_s'])})")
    print(f"  Spark / one process:                        {results['spark_over_loop']:>10.2f}x")
    print(f"  report, read_archive + delivery_report:     {report_s:>10.1f} s")
    print(f"  report, one SQL aggregate query:            {sql_s:>10.1f} s")


if __name__ == "__main__":
    main()
