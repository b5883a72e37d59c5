"""What a lease renewal costs, to choose `release_stuck_timeout`'s default.

A running subscriber renews the leases of every message it holds in one statement every
`release_stuck_timeout / 3`. This script holds `--held` messages in PROCESSING, times
that statement (`Driver.extend_leases`) on each database, and prints its median and the
share of one renewal interval it takes at the default timeout:

    python -m benchmarks.leases --held 100 1000 10000 [--databases postgresql mysql sqlite]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla import MessageState, SqlaBroker
from faststream_sqla.clock import utc_now
from faststream_sqla.drivers import driver_for
from faststream_sqla.schema import QueueTables
from faststream_sqla.subscriber.config import ConsumeOptions

from .common import DATABASES, fresh_target, make_targets

#: timed renewals per size, of which the median counts
RENEWALS = 15


async def renewal_seconds(url: str, held: int) -> float:
    """Median seconds of one renewal of `held` leases."""
    async with SqlaBroker(url) as broker:
        for start in range(0, held, 1000):
            await broker.publish_batch(*range(start, min(held, start + 1000)), queue="leases")
    engine = create_async_engine(url)
    try:
        tables = QueueTables()
        driver = driver_for(engine, tables)
        message = tables.message
        async with engine.begin() as conn:
            await conn.execute(
                message.update().values(
                    state=MessageState.PROCESSING, claims_count=1, acquired_at=utc_now()
                )
            )
            ids = (await conn.execute(sa.select(message.c.id))).scalars().all()
        leases = [(i, 1) for i in ids]
        samples = []
        for _ in range(RENEWALS):
            began = time.perf_counter()
            renewed = await driver.extend_leases(engine, leases)
            samples.append(time.perf_counter() - began)
            assert renewed == held, (renewed, held)
        async with engine.begin() as conn:
            await conn.execute(message.delete())
        return statistics.median(samples)
    finally:
        await engine.dispose()


async def main(databases: list[str], sizes: list[int]) -> None:
    interval = ConsumeOptions().release_stuck_timeout / 3
    print(f"default release_stuck_timeout: renewal every {interval:g} s")
    with tempfile.TemporaryDirectory() as tmp:
        for database, target in make_targets(databases, Path(tmp)).items():
            await fresh_target(database, target.url)
            for held in sizes:
                seconds = await renewal_seconds(target.url, held)
                print(
                    f"{database:10} held {held:>6}: renewal {seconds * 1000:8.2f} ms, "
                    f"{seconds / interval:.4%} of the interval"
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--databases", nargs="+", default=list(DATABASES), choices=DATABASES)
    parser.add_argument("--held", nargs="+", type=int, default=[100, 1000, 10000])
    args = parser.parse_args()
    asyncio.run(main(args.databases, args.held))
