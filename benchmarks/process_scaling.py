"""Draining one queue with 1, 2, 4, 8 and 16 processes: a plain queue and a channelled
one (16 channels, each at most 4 in flight).

``python -m benchmarks.process_scaling [--database postgresql] [--n 2000]
[--processes 1,2,4,8,16] [--work-ms 2]``

Each process is a broker with one subscriber (``max_workers`` 4, fixed claims of 10,
so that a small backlog is still shared out) whose handler waits ``--work-ms`` (a
stand-in for the I/O a real handler waits on). The processes start on an empty queue
and say when they are ready; then the clock starts, one ``publish_batch`` stores the
backlog, and the clock stops when the message table is empty (polled every 20 ms).

Reported per queue kind and process count: total and per-process throughput; each
process's share of the messages against the mean share (min and max; "fair" when
every share is within 2x of the mean); the channel claim's version conflicts (a claim
whose write found the channels changed by another process, and read again) per
claim; and the messages claimed more than once (`claims_count` > 1 in the archive).

``FSQLA_WORKER_NETNS=ns1,ns2`` runs the workers in those network namespaces in turn
(``ip netns exec``, as root); point ``FSQLA_PG_URL`` at a server address they reach.

Timed figures from a machine shared with other work are noisy: compare the counts of
one run with each other, and rerun before believing a rate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla import Envelope, SqlaBroker
from faststream_sqla.admin import QueueAdmin

from .common import REPO, clear_ours, count_rows, fresh_target, make_targets

QUEUES = {"plain": "scaling_plain", "channelled": "scaling_channels"}
CHANNELS = 16
CHANNEL_CONCURRENCY = 4
CLAIMS = 10
MAX_WORKERS = 4
#: a share this many times the mean or more, or the mean over this or less, is unfair
FAIR_WITHIN = 2.0


# -- one worker process --------------------------------------------------------------


async def work(args: dict[str, Any]) -> None:
    """Handle `queue` until SIGTERM, then write what this process did to `out`."""
    from faststream_sqla.channels import claim as channel_claim

    claims = {"calls": 0, "conflicts": 0}
    claim_once = channel_claim.claim_once

    async def counted_claim_once(*a: Any, **kw: Any) -> Any:
        # None: the version check failed, another process changed the channels first
        rows = await claim_once(*a, **kw)
        claims["calls"] += 1
        claims["conflicts"] += rows is None
        return rows

    channel_claim.claim_once = counted_claim_once  # type: ignore[assignment]
    handled = 0
    pause = float(args["work_ms"]) / 1000
    broker = SqlaBroker(args["url"], logger=None)

    @broker.subscriber(
        args["queue"], max_workers=MAX_WORKERS, fetch_batch_size=CLAIMS,
        max_fetch_batch_size=CLAIMS,
    )
    async def handle(body: int) -> None:
        nonlocal handled
        handled += 1
        if pause:
            await asyncio.sleep(pause)

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with broker:
        await broker.start()
        Path(args["ready"]).touch()
        await stop.wait()
    Path(args["out"]).write_text(json.dumps({"handled": handled, **claims}))


# -- the run ---------------------------------------------------------------------------


async def drain(url: str, kind: str, n: int, processes: int, work_ms: float) -> dict[str, Any]:
    queue = QUEUES[kind]
    await clear_ours(url)
    if kind == "channelled":
        async with QueueAdmin(url) as admin:
            await admin.set_queue_limits(queue, channel_max_concurrency=CHANNEL_CONCURRENCY)
    folder = Path(tempfile.mkdtemp(prefix="fsqla-scaling-"))
    procs = []
    for i in range(processes):
        args = {
            "url": url, "queue": queue, "work_ms": work_ms,
            "ready": str(folder / f"ready-{i}"), "out": str(folder / f"out-{i}.json"),
        }
        # FSQLA_WORKER_NETNS="ns1,ns2": the workers run in these network namespaces in
        # turn (`ip netns exec`), reaching the database over their own veth link
        spaces = [n for n in os.environ.get("FSQLA_WORKER_NETNS", "").split(",") if n]
        prefix = ["ip", "netns", "exec", spaces[i % len(spaces)]] if spaces else []
        procs.append(await asyncio.create_subprocess_exec(
            *prefix, sys.executable, "-m", "benchmarks.process_scaling", "--worker",
            json.dumps(args), cwd=str(REPO),
        ))
    engine = create_async_engine(url)
    try:
        deadline = time.monotonic() + 120
        while len(list(folder.glob("ready-*"))) < processes:
            if time.monotonic() > deadline or any(p.returncode is not None for p in procs):
                raise RuntimeError("the worker processes did not start")
            await asyncio.sleep(0.05)  # another process's start: no event to await here
        bodies = [
            Envelope(i, channel=f"c{i % CHANNELS}") if kind == "channelled" else i
            for i in range(n)
        ]
        t0 = time.perf_counter()
        async with SqlaBroker(url, logger=None) as publisher:
            await publisher.publish_batch(*bodies, queue=queue)
        deadline = time.monotonic() + 60 + n / 20
        while await count_rows(engine, "message"):
            if time.monotonic() > deadline:
                raise TimeoutError("the queue did not drain in time")
            await asyncio.sleep(0.02)  # polling the table another process empties
        elapsed = time.perf_counter() - t0
        reclaimed = await count_rows(engine, "message_archive", "WHERE claims_count > 1")
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        await asyncio.gather(*(p.wait() for p in procs))
        await engine.dispose()
    done = [json.loads((folder / f"out-{i}.json").read_text()) for i in range(processes)]
    handled = [d["handled"] for d in done]
    mean = sum(handled) / processes
    calls = sum(d["calls"] for d in done)
    return {
        "kind": kind,
        "processes": processes,
        "n": n,
        "msg_per_s": n / elapsed,
        "per_process_msg_per_s": n / elapsed / processes,
        "handled": handled,
        "min_share_of_mean": min(handled) / mean,
        "max_share_of_mean": max(handled) / mean,
        "fair": all(mean / FAIR_WITHIN <= h <= mean * FAIR_WITHIN for h in handled),
        "channel_claims": calls,
        "conflicts_per_claim": sum(d["conflicts"] for d in done) / calls if calls else None,
        "claimed_more_than_once": reclaimed,
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| queue | processes | msg/s | msg/s a process | share min-max of mean | fair (2x) "
        "| conflicts a claim | claimed twice+ |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        conflicts = "-" if r["conflicts_per_claim"] is None else f"{r['conflicts_per_claim']:.3f}"
        lines.append(
            f"| {r['kind']} | {r['processes']} | {r['msg_per_s']:.0f} | "
            f"{r['per_process_msg_per_s']:.0f} | {r['min_share_of_mean']:.2f}-"
            f"{r['max_share_of_mean']:.2f} | {'yes' if r['fair'] else 'no'} | {conflicts} | "
            f"{r['claimed_more_than_once']} |"
        )
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> None:
    target = make_targets([args.database], Path(tempfile.mkdtemp()))[args.database]
    await fresh_target(args.database, target.url)
    rows = []
    for kind in QUEUES:
        for processes in args.processes:
            row = await drain(target.url, kind, args.n, processes, args.work_ms)
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    await clear_ours(target.url)
    print(table(rows))
    if len(rows) > 1:
        rates = [r["per_process_msg_per_s"] for r in rows]
        print(f"\nper-process msg/s, median of all runs: {statistics.median(rates):.0f}")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database", default="postgresql", choices=["postgresql", "mysql", "sqlite"]
    )
    parser.add_argument("--n", type=int, default=2000, help="messages a drain")
    parser.add_argument(
        "--processes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4, 8, 16]
    )
    parser.add_argument("--work-ms", type=float, default=2.0, help="each handler's wait")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    options = parse()
    if options.worker:
        asyncio.run(work(json.loads(options.worker)))
    else:
        os.environ.setdefault("PYTHONPATH", str(REPO))
        asyncio.run(main(options))
