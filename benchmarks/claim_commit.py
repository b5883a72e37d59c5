"""What a durable claim costs on PostgreSQL: the drain and the batch drain with the
claim's `synchronous_commit` off (as without a synchronous standby) and on (as with
one, minus the standby's round trip), in alternating runs of the same process, and
the median ratio on/off.

`python -m benchmarks.claim_commit --url postgresql+asyncpg://postgres@127.0.0.1:5432/DB
[--n 20000] [--pairs 5]` (the database is given its schema; its queue tables are
emptied).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from faststream_sqla.drivers.postgresql.driver import PostgresDriver
from faststream_sqla.migrations import upgrade_schema

from .common import DEFAULT_CLAIMS
from .ours import drain_once


@contextmanager
def claims_commit(setting: str) -> Iterator[None]:
    """Every claim of the block runs with `synchronous_commit = setting`."""
    chosen = PostgresDriver.__dict__["claim_commit"]
    PostgresDriver.claim_commit = staticmethod(lambda: sa.literal(setting))  # type: ignore[method-assign]
    try:
        yield
    finally:
        PostgresDriver.claim_commit = chosen  # type: ignore[method-assign]


async def compare(url: str, n: int, pairs: int) -> dict[str, dict[str, list[float]]]:
    await upgrade_schema(url)
    figures: dict[str, dict[str, list[float]]] = {}
    for batch in (False, True):
        scenario = "drain-batch" if batch else "drain"
        runs = figures[scenario] = {"off": [], "on": []}
        await drain_once(url, min(n, 500), claims=DEFAULT_CLAIMS, batch=batch)  # warm-up
        for turn in range(pairs):
            # alternate which goes first, so a drift of the machine favours neither
            for setting in ("off", "on") if turn % 2 == 0 else ("on", "off"):
                with claims_commit(setting):
                    run = await drain_once(url, n, claims=DEFAULT_CLAIMS, batch=batch)
                if run["problem"]:
                    raise RuntimeError(f"{scenario} ({setting}): {run['problem']}")
                runs[setting].append(run["msg_per_s"])
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args(argv)
    figures = asyncio.run(compare(args.url, args.n, args.pairs))
    print(f"{'scenario':<12} {'off msg/s':>10} {'on msg/s':>10} {'on/off':>7}  (medians of {args.pairs})")
    for scenario, runs in figures.items():
        off, on = statistics.median(runs["off"]), statistics.median(runs["on"])
        ratios = [b / a for a, b in zip(runs["off"], runs["on"], strict=True)]
        print(f"{scenario:<12} {off:>10.0f} {on:>10.0f} {statistics.median(ratios):>7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
