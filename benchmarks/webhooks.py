"""Webhook delivery against its ceiling, and a slow endpoint beside a fast one.

- ceiling: httpx's own request loop, `--concurrency` POSTs in flight, to a no-op
  receiver (uvicorn, a process of its own);
- delivery: the same number of deliveries, published to a topic one endpoint receives,
  drained by `WebhookDelivery(max_workers=--concurrency)` until all are archived;
  the ratio delivery / ceiling (goal: at least 0.7);
- fair: the fast endpoint's rate with a slow one (1 s a request, max_concurrency 2)
  receiving at the same time, over its rate alone (goal: at least 0.8).

    python -m benchmarks.webhooks [--databases sqlite,postgresql,mysql] [--deliveries 2000]
        [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla import SqlaBroker
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.schema import DELIVERY_QUEUE, QueueTables
from faststream_sqla.webhooks import WebhookDelivery

from .common import (
    BENCH_DB,
    DATABASES,
    LABELS,
    REPO,
    create_database,
    make_targets,
    reset_our_schema,
)

#: a database of its own: the suite's smoke test may run beside this one in CI
WEBHOOKS_DB = f"{BENCH_DB}_webhooks"

#: the goals (docs/benchmarks.md#webhooks)
CEILING_GOAL, FAIR_GOAL = 0.7, 0.8
#: deliveries the slow endpoint gets in the fair run: more than it can finish meanwhile
SLOW_DELIVERIES = 40


@contextlib.asynccontextmanager
async def receiver() -> AsyncIterator[str]:
    """The no-op receiver in a uvicorn process of its own; its base URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "benchmarks.apps.noop_receiver:app", "--host",
         "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"],
        cwd=REPO,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(300):
                with contextlib.suppress(httpx.TransportError):
                    await client.post(url + "/ready")
                    break
                await asyncio.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def ceiling(url: str, count: int, concurrency: int) -> float:
    """POSTs a second through one httpx client, `concurrency` in flight."""
    body = b'{"order": 1, "note": "' + b"x" * 100 + b'"}'
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits) as client:
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(count):
            queue.put_nowait(i)

        async def worker() -> None:
            while not queue.empty():
                queue.get_nowait()
                response = await client.post(url + "/hook", content=body)
                assert response.status_code == 204

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return count / (time.perf_counter() - start)


async def archived(url: str, channel: str) -> int:
    engine = create_async_engine(url)
    a = QueueTables(dialect=engine.dialect.name).archive
    try:
        async with engine.connect() as conn:
            stmt = sa.select(sa.func.count()).where(
                a.c.queue == DELIVERY_QUEUE, a.c.channel == channel
            )
            return int(await conn.scalar(stmt) or 0)
    finally:
        await engine.dispose()


async def delivered(
    url: str, receiver_url: str, count: int, concurrency: int, *, with_slow: bool
) -> float:
    """Deliveries a second to the fast endpoint, from start to the last archived."""
    await reset_our_schema(url)
    async with QueueAdmin(url) as admin:
        await admin.add_endpoint(
            "fast", receiver_url + "/hook", topics=["bench.fast"], allow_private=True
        )
        await admin.add_endpoint(
            "slow", receiver_url + "/slow", topics=["bench.slow"], allow_private=True,
            max_concurrency=2,
        )  # fmt: skip
    body = {"order": 1, "note": "x" * 100}
    publisher = SqlaBroker(url, logger=None)
    async with publisher:
        await publisher.connect()
        for start in range(0, count, 1000):
            await publisher.publish_batch(*[body] * min(1000, count - start), topic="bench.fast")
        if with_slow:
            await publisher.publish_batch(*[body] * SLOW_DELIVERIES, topic="bench.slow")
    broker = SqlaBroker(url, logger=None)
    WebhookDelivery(broker, max_workers=concurrency, breaker_threshold=None)
    async with broker:
        start = time.perf_counter()
        await broker.start()
        while await archived(url, "fast") < count:
            await asyncio.sleep(0.02)
        elapsed = time.perf_counter() - start
    return count / elapsed


async def main(databases: list[str], count: int, concurrency: int) -> int:
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        targets = make_targets(databases, Path(tmp))
        async with receiver() as receiver_url:
            top = await ceiling(receiver_url, count, concurrency)
            print(f"httpx's own loop, {concurrency} in flight: {top:,.0f} requests/s")
            print(f"{'database':<12}{'delivered/s':>12}{'/ ceiling':>10}{'fast beside slow':>18}")
            for db, target in targets.items():
                url = target.url
                if db != "sqlite":
                    await create_database(db, WEBHOOKS_DB)
                    url = make_url(url).set(database=WEBHOOKS_DB).render_as_string(False)
                await reset_our_schema(url)
                alone = await delivered(url, receiver_url, count, concurrency, with_slow=False)
                beside = await delivered(url, receiver_url, count, concurrency, with_slow=True)
                ratio, fair = alone / top, beside / alone
                failed |= ratio < CEILING_GOAL or fair < FAIR_GOAL
                print(f"{LABELS[db]:<12}{alone:>12,.0f}{ratio:>10.2f}{fair:>18.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--databases", default=",".join(DATABASES))
    parser.add_argument("--deliveries", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main(args.databases.split(","), args.deliveries, args.concurrency)))
