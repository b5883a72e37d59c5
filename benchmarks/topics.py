"""Publishing to a topic against publishing to one queue, as a ratio of rows written
per second measured in the same run.

- one queue: publish_batch of 10,000 messages to a queue;
- topic: publish_batch of 1,000 messages to a topic bound to 10 queues (10,000 rows:
  the bindings read, then one copy of each message per queue).

Each topic run is set between two plain runs and divided by their geometric mean
(`over_neighbours`), so a machine whose speed drifts moves both sides alike; the
figure is the median over the pairs. The tables are our own (`bench_topics_*`) in the
benchmark database, emptied before every run.

    python -m benchmarks.topics [--databases sqlite,postgresql,mysql] [--pairs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla import SqlaBroker
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.migrations import upgrade_schema, version_table_for
from faststream_sqla.schema import QueueTables, TableNames

from .common import (
    DATABASES,
    LABELS,
    clear_tables,
    ensure_server_databases,
    make_targets,
    over_neighbours,
)

TABLES = TableNames("bench_topics_message", "bench_topics_archive")
QUEUES = 10
TOPIC_BATCH = 1_000
QUEUE_BATCH = QUEUES * TOPIC_BATCH
#: the ratio the topic run must reach (docs/benchmarks.md#topics)
GOAL = 0.5


async def fresh_tables(url: str) -> None:
    """Our benchmark tables, dropped and made again at the current revision."""
    engine = create_async_engine(url)
    tables = QueueTables(TABLES, engine.dialect.name)
    try:
        async with engine.begin() as conn:
            # every table of the schema, dependants first, then the version table
            names = [t.name for t in reversed(tables.metadata.sorted_tables)]
            names.append(version_table_for(TABLES))
            for name in names:
                q = engine.dialect.identifier_preparer.quote(name)
                await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {q}")
        await upgrade_schema(engine, message_table=TABLES.message, archive_table=TABLES.archive)
    finally:
        await engine.dispose()


async def measure(database: str, url: str, pairs: int) -> dict[str, float]:
    if database != "sqlite":
        await ensure_server_databases(database)
    await fresh_tables(url)
    async with QueueAdmin(url, message_table=TABLES.message, archive_table=TABLES.archive) as a:
        for i in range(QUEUES):
            await a.bind("orders.*", f"q{i:02d}")
    engine = create_async_engine(url)
    live = [t.name for t in QueueTables(TABLES, engine.dialect.name).live]
    await engine.dispose()
    bodies = [{"order": i, "note": "x" * 100} for i in range(QUEUE_BATCH)]
    broker = SqlaBroker(
        url, message_table=TABLES.message, archive_table=TABLES.archive, logger=None
    )

    async def rows_per_second(**target: str) -> float:
        await clear_tables(url, *live, keep_ids=True)
        count = TOPIC_BATCH if "topic" in target else QUEUE_BATCH
        start = time.perf_counter()
        ids = await broker.publish_batch(*bodies[:count], **target)
        elapsed = time.perf_counter() - start
        assert len(ids) == QUEUE_BATCH, len(ids)
        return len(ids) / elapsed

    ratios, plain, topic = [], [], []
    async with broker:
        await broker.connect()
        await rows_per_second(queue="q00")  # warm: connections, statement caches
        await rows_per_second(topic="orders.created")
        before = await rows_per_second(queue="q00")
        for _ in range(pairs):
            fanned = await rows_per_second(topic="orders.created")
            after = await rows_per_second(queue="q00")
            ratios.append(over_neighbours(fanned, before, after))
            plain.append(before)
            topic.append(fanned)
            before = after
    await clear_tables(url, *live, keep_ids=True)
    return {
        "queue_rows_per_s": statistics.median(plain),
        "topic_rows_per_s": statistics.median(topic),
        "ratio": statistics.median(ratios),
    }


async def main(databases: list[str], pairs: int) -> int:
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        targets = make_targets(databases, Path(tmp))
        print(
            f"publish_batch({TOPIC_BATCH:,}) to a topic bound to {QUEUES} queues over "
            f"publish_batch({QUEUE_BATCH:,}) to one queue, rows/s (median of {pairs} pairs)"
        )
        print(f"{'database':<12}{'one queue':>12}{'topic':>12}{'ratio':>8}")
        for db, target in targets.items():
            figures = await measure(db, target.url, pairs)
            failed |= figures["ratio"] < GOAL
            print(
                f"{LABELS[db]:<12}{figures['queue_rows_per_s']:>12,.0f}"
                f"{figures['topic_rows_per_s']:>12,.0f}{figures['ratio']:>8.2f}"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--databases", default=",".join(DATABASES))
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main(args.databases.split(","), args.pairs)))
