"""Backfill a queue from a table of historical orders with Spark:
`python -m examples.spark_backfill` (needs the `spark` extra and Java 17+).

Uses SQLite by default; set DATABASE_URL to run it on PostgreSQL or MariaDB, e.g.
DATABASE_URL=postgresql+asyncpg://postgres@127.0.0.1:5432/test

Every order becomes one message of the "order-backfill" queue, its row as the JSON
body; the orders of one customer are handled in order (ordering key), and running the
script twice publishes nothing the second time while the first run's messages wait.
"""

from __future__ import annotations

import asyncio
import os

from pyspark.sql import DataFrame, SparkSession

from faststream_sqla import upgrade_schema
from faststream_sqla.spark import Constant, publish_dataframe, read_queue, spark_session

DATABASE_URL = os.environ.get("DATABASE_URL", "sqlite+aiosqlite:///example.db")


def historical_orders(spark: SparkSession) -> DataFrame:
    """Stands in for spark.read.parquet("s3://.../orders/") or a warehouse table."""
    return spark.range(1000).selectExpr(
        "id AS order_id",
        "concat('customer-', id % 25) AS customer",
        "round(10 + (id * 7919) % 500 / 10.0, 2) AS amount",
        "date_add(DATE'2024-01-01', CAST(id % 365 AS INT)) AS ordered_on",
    )


def backfill(spark: SparkSession, url: str) -> dict[str, int]:
    orders = historical_orders(spark)
    published = publish_dataframe(
        orders,
        url,
        "order-backfill",
        ordering_key="customer",  # a column: one customer's orders in order
        priority=Constant(1),  # a constant for every row: ahead of default-priority traffic
        job_key="orders-2024",  # names this backfill in every row's idempotency key
    )
    waiting = read_queue(spark, url, queues=["order-backfill"]).count()
    return {"published": published, "waiting": waiting}


def main() -> None:
    asyncio.run(upgrade_schema(DATABASE_URL))  # production runs `faststream-sqla db upgrade`
    spark = spark_session("local[2]")
    try:
        print(backfill(spark, DATABASE_URL))
        print(backfill(spark, DATABASE_URL))  # again: nothing new
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
