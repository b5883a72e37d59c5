"""Measurements that need a process of their own: ``python -m benchmarks.worker '<json>'``.

Prints one JSON line with the result. Tasks:

- ``rss-drain``: drain ``n`` messages of a standing backlog with a no-op handler and
  report the process's peak resident memory (VmHWM; ``resource.getrusage`` too, though
  on Linux it inherits the parent's peak across fork+exec) and the largest resident size
  sampled every 10 ms during the drain: the prefetch buffer, not the backlog, should
  decide it.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
from typing import Any

from faststream_sqla import SqlaBroker

from .common import QUEUE, CountDown, claim_options, rate, timed_drain


def ru_maxrss_kib() -> int:
    """getrusage's peak (KiB on Linux). Linux carries the parent's peak across fork+exec
    into it, so a small child of a big parent reports the parent's size."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def peak_rss_kib() -> int:
    """This process's own peak resident size: VmHWM (reset at exec), else getrusage."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return ru_maxrss_kib()


def current_rss_kib() -> int:
    """Resident memory now (Linux); the peak from getrusage elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * (resource.getpagesize() // 1024)
    except OSError:
        return peak_rss_kib()


async def sample_rss(into: list[int]) -> None:
    while True:
        into.append(current_rss_kib())
        await asyncio.sleep(0.01)


async def rss_drain(args: dict[str, Any]) -> dict[str, Any]:
    n, claims = int(args["n"]), str(args["claims"])
    broker = SqlaBroker(
        args["url"], logger=None, message_table=args["message_table"],
        archive_table=args["archive_table"],
    )
    countdown = CountDown(n)
    sub = broker.subscriber(
        QUEUE, max_workers=int(args["max_workers"]), **claim_options(claims)
    )

    @sub
    async def handle(body: int) -> None:
        countdown.hit()

    await broker.connect()
    connected = current_rss_kib()
    samples: list[int] = []
    sampler = asyncio.create_task(sample_rss(samples))
    try:
        elapsed = await timed_drain(broker, countdown, n)
    finally:
        sampler.cancel()
    return {
        "msg_per_s": rate(n, elapsed),
        "rss_connected_kib": connected,
        "rss_max_during_drain_kib": max(samples, default=connected),
        "rss_peak_kib": peak_rss_kib(),
        "ru_maxrss_kib": ru_maxrss_kib(),
        "claims": claims,
        "buffer_capacity": sub.options.largest_buffer_capacity,
    }


TASKS = {"rss-drain": rss_drain}


def main() -> None:
    args = json.loads(sys.argv[1])
    result = asyncio.run(TASKS[args["task"]](args))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
