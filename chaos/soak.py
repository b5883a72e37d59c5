"""A soak run: publish at a steady rate and consume for a given time, reporting each
interval's throughput and the tables' sizes (and, on PostgreSQL, their dead tuples), so
that bloat and slowdowns over hours show up as a trend.

`python -m chaos.soak --url URL --minutes 60 --rate 2000` prints a row per minute and
a verdict (everything published was handled, nothing left behind).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from faststream_sqla import SqlaBroker
from faststream_sqla.schema import QueueTables
from faststream_sqla.urls import masked

QUEUE = "soak"
#: publishes go out in batches of this many, spread evenly over each second
BATCH = 100


@dataclass
class SoakSample:
    elapsed_s: float
    published: int
    handled: int
    handled_per_s: float
    queued: int
    archived: int
    table_mib: float | None
    dead_tuples: int | None


@dataclass
class SoakReport:
    database: str
    seconds: float
    published: int
    handled: int
    left_queued: int
    samples: list[SoakSample]

    @property
    def ok(self) -> bool:
        return self.handled == self.published and self.left_queued == 0


_SIZE_SQL = {
    "postgresql": "SELECT pg_total_relation_size(CAST(:t AS regclass))",
    "mysql": "SELECT data_length + index_length FROM information_schema.tables "
             "WHERE table_schema = DATABASE() AND table_name = :t",
}
_DEAD_SQL = "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = :t"


async def _table_bytes(engine: AsyncEngine, table: str) -> int | None:
    async with engine.connect() as conn:
        name = engine.dialect.name
        if name == "sqlite":  # the whole file: SQLite keeps every table in it
            pages = await conn.scalar(sa.text("PRAGMA page_count"))
            size = await conn.scalar(sa.text("PRAGMA page_size"))
            return int(pages * size)
        value = await conn.scalar(sa.text(_SIZE_SQL[name]), {"t": table})
        return None if value is None else int(value)


async def _sample(
    engine: AsyncEngine, tables: QueueTables, began: float, published: int, handled: int,
    previous: SoakSample | None,
) -> SoakSample:
    elapsed = time.monotonic() - began
    async with engine.connect() as conn:
        count = sa.select(sa.func.count())
        queued = int(await conn.scalar(count.select_from(tables.message)))
        archived = int(await conn.scalar(count.select_from(tables.archive)))
        dead = None
        if engine.dialect.name == "postgresql":
            dead = await conn.scalar(sa.text(_DEAD_SQL), {"t": tables.names.message})
    size = await _table_bytes(engine, tables.names.message)
    since = previous.elapsed_s if previous else 0.0
    done_before = previous.handled if previous else 0
    return SoakSample(
        elapsed_s=round(elapsed, 1),
        published=published,
        handled=handled,
        handled_per_s=round((handled - done_before) / max(elapsed - since, 1e-9), 1),
        queued=queued,
        archived=archived,
        table_mib=None if size is None else round(size / 2**20, 2),
        dead_tuples=None if dead is None else int(dead),
    )


async def run_soak(
    url: str, *, seconds: float, rate: int = 1000, interval: float = 60.0,
    on_sample: Any = None, drain_timeout: float = 120.0,
) -> SoakReport:
    """Publish `rate` messages a second for `seconds` while one broker consumes them,
    sampling every `interval` seconds; then let the consumer finish the backlog."""
    engine = create_async_engine(url)
    tables = QueueTables()
    async with engine.begin() as conn:
        await conn.execute(tables.message.delete())
        await conn.execute(tables.archive.delete())
    consumer = SqlaBroker(url, logger=None)
    handled = 0
    all_handled = asyncio.Event()
    published = 0

    @consumer.subscriber(QUEUE, max_workers=4, max_fetch_interval=0.1)
    async def handle(body: int) -> None:
        nonlocal handled
        handled += 1
        if publishing_done and handled >= published:
            all_handled.set()

    publishing_done = False
    samples: list[SoakSample] = []
    try:
        async with consumer, SqlaBroker(url, logger=None) as producer:
            await consumer.start()
            began = time.monotonic()
            next_sample = began + interval
            batches_per_s = max(rate / BATCH, 1e-9)
            while (now := time.monotonic()) - began < seconds:
                due = int((now - began) * batches_per_s) + 1
                while published < min(due * BATCH, int(seconds * rate)):
                    await producer.publish_batch(
                        *range(published, published + BATCH), queue=QUEUE
                    )
                    published += BATCH
                if now >= next_sample:
                    samples.append(await _sample(
                        engine, tables, began, published, handled, samples[-1] if samples else None
                    ))
                    if on_sample is not None:
                        on_sample(samples[-1])
                    next_sample += interval
                await asyncio.sleep(1 / batches_per_s)  # the publishing schedule's tick
            # A slow host falls behind the schedule; the total is fixed all the same.
            total = int(seconds * rate)
            while published < total:
                count = min(BATCH, total - published)
                await producer.publish_batch(*range(published, published + count), queue=QUEUE)
                published += count
            publishing_done = True
            if handled >= published:
                all_handled.set()
            await asyncio.wait_for(all_handled.wait(), drain_timeout)
            total = time.monotonic() - began
        # once the consumer has stopped: its last outcomes are written
        samples.append(await _sample(
            engine, tables, began, published, handled, samples[-1] if samples else None
        ))
        if on_sample is not None:
            on_sample(samples[-1])
        async with engine.connect() as conn:
            left = int(await conn.scalar(sa.select(sa.func.count()).select_from(tables.message)))
        return SoakReport(
            database=engine.dialect.name, seconds=round(total, 1), published=published,
            handled=handled, left_queued=left, samples=samples,
        )
    finally:
        await engine.dispose()


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="a database with the queue tables")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=1000, help="messages published a second")
    parser.add_argument("--interval", type=float, default=60.0, help="seconds between rows")
    args = parser.parse_args(argv)
    console = Console()
    console.print(f"soak on {masked(args.url)}: {args.rate}/s for {args.minutes} min")
    columns = list(SoakSample.__dataclass_fields__)
    console.print("  ".join(columns))

    def show(sample: SoakSample) -> None:
        console.print("  ".join(str(v) for v in asdict(sample).values()))

    report = asyncio.run(run_soak(
        args.url, seconds=args.minutes * 60, rate=args.rate, interval=args.interval,
        on_sample=show,
    ))
    table = Table(title="soak")
    table.add_column("figure")
    table.add_column("value")
    for key in ("database", "seconds", "published", "handled", "left_queued"):
        table.add_row(key, str(getattr(report, key)))
    table.add_row("verdict", "OK" if report.ok else "FAILED")
    console.print(table)
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
