"""pgqueuer (PyPI 1.6.0), PostgreSQL only, the same workloads as ours, in its own process.

Its schema is installed with its own ``Queries.install()`` in ``fsqla_bench_peer``.
Consumers dequeue with ``batch_size=1000``; a finished job is deleted from its queue
table and logged (its equivalent of our archive). Wake-ups come from its NOTIFY trigger.
"""

from __future__ import annotations

import asyncio
import json
import logging
import statistics
import sys
import time
from datetime import timedelta
from typing import Any

import asyncpg
from pgqueuer import Queries, QueueManager
from pgqueuer.db import AsyncpgDriver

from benchmarks.common import (
    PAIRED_DRAIN_METRIC,
    CountDown,
    Results,
    drain_timeout,
    driver_params,
    percentiles,
    rate,
    send_timestamps_and_wait,
)

SYSTEM = "pgqueuer"
ENTRYPOINT = "bench"
BATCH_SIZE = 1000


async def connect(url: str) -> asyncpg.Connection:
    p = driver_params(url)
    return await asyncpg.connect(
        host=p["host"], port=p["port"], user=p["user"], password=p["password"] or None,
        database=p["database"],
    )


async def install(url: str) -> None:
    conn = await connect(url)
    try:
        queries = Queries(AsyncpgDriver(conn))
        if await queries.schema_is_installed():
            await queries.uninstall()
        await queries.install()
    finally:
        await conn.close()


async def clear(url: str) -> None:
    conn = await connect(url)
    try:
        queries = Queries(AsyncpgDriver(conn))
        await queries.clear_queue()
        await queries.clear_queue_log()
    finally:
        await conn.close()


async def enqueue_batches(queries: Queries, start: int, n: int) -> None:
    for lo in range(start, start + n, 1000):
        hi = min(start + n, lo + 1000)
        await queries.enqueue(
            [ENTRYPOINT] * (hi - lo), [str(i).encode() for i in range(lo, hi)], [0] * (hi - lo)
        )


async def queued(url: str) -> int:
    conn = await connect(url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM pgqueuer"))
    finally:
        await conn.close()


async def drain_once(url: str, n: int) -> dict[str, Any]:
    await clear(url)
    conn = await connect(url)
    await enqueue_batches(Queries(AsyncpgDriver(conn)), 0, n)
    await conn.close()

    conn = await connect(url)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))
    countdown = CountDown(n)

    @qm.entrypoint(ENTRYPOINT)
    async def handle(job: Any) -> None:
        int(job.payload)
        countdown.hit()
        if countdown.done.is_set():
            qm.shutdown.set()

    t0 = time.perf_counter()
    try:
        await asyncio.wait_for(
            qm.run(batch_size=BATCH_SIZE, dequeue_timeout=timedelta(seconds=1)),
            drain_timeout(n),
        )
    finally:
        await conn.close()
    elapsed = time.perf_counter() - t0
    left = await queued(url)
    problem = None if countdown.count >= n and left == 0 else (
        f"{countdown.count} of {n} handled, {left} jobs left"
    )
    return {"msg_per_s": rate(n, elapsed), "seconds": elapsed, "problem": problem}


async def drain(args: dict[str, Any], results: Results) -> None:
    url, n = args["url"], int(args["drain_n"])
    await drain_once(url, min(500, n))  # warm-up
    runs = [await drain_once(url, n) for _ in range(int(args.get("repeats", 1)))]
    for run in runs:
        if run["problem"]:
            results.error("drain", "postgresql", "pgqueuer", run["problem"])
    rates = [run["msg_per_s"] for run in runs]
    results.add(SYSTEM, "drain", "msg_per_s", "postgresql", statistics.median(rates), "msg/s",
                n=n, batch_size=BATCH_SIZE, repeat_runs=rates)


async def paired_drain(args: dict[str, Any], results: Results) -> None:
    """One drain, the peer's half of a pair with our batch drain (the runner alternates
    the two); warmed up first, as this process is fresh."""
    url, n = args["url"], int(args["drain_n"])
    await drain_once(url, min(500, n))
    run = await drain_once(url, n)
    if run["problem"]:
        results.error("drain", "postgresql", "pgqueuer paired", run["problem"])
        return
    results.add(SYSTEM, "drain", PAIRED_DRAIN_METRIC, "postgresql", run["msg_per_s"], "msg/s",
                n=n, batch_size=BATCH_SIZE)


async def publish(args: dict[str, Any], results: Results) -> None:
    url = args["url"]
    n_single, n_batch = int(args["n_single"]), int(args["n_batch"]) // 1000 * 1000
    await clear(url)
    conn = await connect(url)
    try:
        queries = Queries(AsyncpgDriver(conn))
        for i in range(20):
            await queries.enqueue(ENTRYPOINT, str(i).encode())
        await enqueue_batches(queries, 0, 1000)
        await clear(url)
        t0 = time.perf_counter()
        for i in range(n_single):
            await queries.enqueue(ENTRYPOINT, str(i).encode())
        single = rate(n_single, time.perf_counter() - t0)
        t0 = time.perf_counter()
        await enqueue_batches(queries, 0, n_batch)
        batch = rate(n_batch, time.perf_counter() - t0)
    finally:
        await conn.close()
    stored = await queued(url)
    if stored != n_single + n_batch:
        results.error("publish", "postgresql", "pgqueuer count", f"{stored} stored")
    await clear(url)
    results.add(SYSTEM, "publish", "single_msg_per_s", "postgresql", single, "msg/s", n=n_single)
    results.add(SYSTEM, "publish", "batch_msg_per_s", "postgresql", batch, "msg/s", n=n_batch,
                batch=1000)


async def latency(args: dict[str, Any], results: Results) -> None:
    url = args["url"]
    rate_per_s, seconds = float(args["latency_rate"]), float(args["latency_seconds"])
    count = int(rate_per_s * seconds)
    await clear(url)
    samples: list[float] = []
    cconn, pconn = await connect(url), await connect(url)
    qm = QueueManager(Queries(AsyncpgDriver(cconn)))

    @qm.entrypoint(ENTRYPOINT)
    async def handle(job: Any) -> None:
        samples.append(time.perf_counter() - float(job.payload))

    publisher = Queries(AsyncpgDriver(pconn))
    task = asyncio.create_task(
        qm.run(batch_size=BATCH_SIZE, dequeue_timeout=timedelta(seconds=1))
    )
    try:
        await asyncio.sleep(0.5)

        achieved, failed = await send_timestamps_and_wait(
            lambda sent: publisher.enqueue(ENTRYPOINT, repr(sent).encode()), samples,
            rate_per_s=rate_per_s, count=count, grace=10,
        )
    finally:
        qm.shutdown.set()
        await asyncio.wait_for(task, 30)
        await cconn.close()
        await pconn.close()
    await clear(url)
    if failed:
        results.error("latency", "postgresql", "pgqueuer publish",
                      f"{len(failed)} publishes failed: {failed[0]}")
    count -= len(failed)
    if len(samples) < count:
        results.error("latency", "postgresql", "pgqueuer", f"{len(samples)} of {count} delivered")
    stats = percentiles(samples)
    details = {"offered_rate": rate_per_s, "achieved_rate": achieved, "seconds": seconds,
               "wakeup": "notification (its NOTIFY trigger)", "batch_size": BATCH_SIZE,
               "mean_ms": stats.get("mean_ms"), "samples": stats.get("samples")}
    for key in ("p50_ms", "p99_ms", "max_ms"):
        results.add(SYSTEM, "latency", key, "postgresql", stats.get(key), "ms", **details)


async def main(args: dict[str, Any]) -> Results:
    results = Results()
    await install(args["url"])
    for name, fn in (("drain", drain), ("paired_drain", paired_drain), ("publish", publish),
                     ("latency", latency)):
        if name in args.get("workloads", ["drain", "publish", "latency"]):
            try:
                await fn(args, results)
            except Exception as e:  # noqa: BLE001
                results.error(name, "postgresql", "pgqueuer", e)
    return results


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    res = asyncio.run(main(json.loads(sys.argv[1])))
    print(json.dumps({"figures": res.figures, "errors": res.errors}), flush=True)
