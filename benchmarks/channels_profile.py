"""Where a channelled drain's time goes: one drain of benchmarks.channels' "many
channels" scenario under cProfile, with its statements counted per claim.

    python -m benchmarks.channels_profile [--database postgresql] [--size 20000] \
        [--channels 1000] [--limit 2] [--workers 8] [--top 30] [--plain] [--hot] \
        [--sort tottime]

Prints the drain's rate, the channel claims it made (calls, messages per claim, the
claims' share of the drain's wall time), the statements the broker's engine ran by
kind (each claim is one transaction: BEGIN, its statements, COMMIT), and the top
functions by cumulative time. `--plain` profiles the plain drain instead, for
comparison. The database is benchmarks.channels' own (fsqla_bench_channels).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import io
import pstats
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event

from faststream_sqla import SqlaBroker
from faststream_sqla.subscriber import claimer

from . import channels as channels_benchmark
from .channels import (
    channel_targets,
    clear_all,
    ensure_database,
    publish_hot,
    publish_over_channels,
    publish_plain,
    subscriber_options,
)
from .common import QUEUE, CountDown, rate, reset_our_schema, timed_drain
from .ours import verify_drained


def statement_kind(sql: str) -> str:
    """A statement's first words, enough to tell the claim's steps apart."""
    text = re.sub(r"\s+", " ", sql).strip()
    if "RECURSIVE" in text[:40].upper():
        return "WITH RECURSIVE candidates (channels after the rotation)"
    if text.upper().startswith("SELECT") and "FOR UPDATE" in text.upper():
        return "SELECT ... FOR UPDATE (the queue's control row)"
    return text[:90]


async def profiled_drain(url: str, n: int, channels: int, limit: int, plain: bool,
                         top: int, hot: bool = False, sort: str = "cumulative") -> None:
    await clear_all(url)
    broker = SqlaBroker(url, logger=None)
    countdown = CountDown(n)

    @broker.subscriber(QUEUE, **subscriber_options())
    async def handle(body: int) -> None:
        countdown.hit()

    if hot:  # all n on one channel, no limits: the hot channel scenario's backlog
        await publish_hot(url, n, 0, 0, channelled=not plain)
    else:
        await (publish_plain if plain else publish_over_channels(channels, limit))(url, n)
    await broker.connect()

    statements: collections.Counter[str] = collections.Counter()
    statement_seconds: collections.Counter[str] = collections.Counter()
    transactions = collections.Counter[str]()
    sync_engine = broker.engine.sync_engine

    @event.listens_for(sync_engine, "before_cursor_execute")
    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements[statement_kind(statement)] += 1
        conn.info["fsqla_statement_began"] = time.perf_counter()

    @event.listens_for(sync_engine, "after_cursor_execute")
    def timed(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        began_at = conn.info.pop("fsqla_statement_began", None)
        if began_at is not None:  # the driver's round trip, as the broker waits for it
            statement_seconds[statement_kind(statement)] += time.perf_counter() - began_at

    @event.listens_for(sync_engine, "begin")
    def began(conn: Any) -> None:
        transactions["BEGIN"] += 1

    @event.listens_for(sync_engine, "commit")
    def committed(conn: Any) -> None:
        transactions["COMMIT"] += 1

    claims: list[tuple[int, float]] = []  # (messages, seconds) per channel claim
    original = claimer.claim_channelled

    async def claim_channelled(*args: Any, **kwargs: Any) -> Any:
        began_at = time.perf_counter()
        rows = await original(*args, **kwargs)
        claims.append((len(rows), time.perf_counter() - began_at))
        return rows

    claimer.claim_channelled = claim_channelled  # type: ignore[assignment]
    profile = cProfile.Profile() if top else None
    try:
        if profile is not None:
            profile.enable()
        seconds = await timed_drain(broker, countdown, n)
        if profile is not None:
            profile.disable()
    finally:
        claimer.claim_channelled = original
    problem = await verify_drained(url, n)
    if problem:
        raise RuntimeError(problem)

    kind = "plain" if plain else (
        'one channel "hot", no limits' if hot
        else f"{channels} channels, channel_max_concurrency={limit}"
    )
    print(f"{n:,} messages ({kind}): {seconds:.2f} s, {rate(n, seconds):,.0f} msg/s "
          f"({'under cProfile' if profile else 'no profiler'})")
    if claims:
        taken = [k for k, _ in claims]
        spent = sum(s for _, s in claims)
        ordered = sorted(s for _, s in claims)
        print(f"channel claims: {len(claims):,}, {sum(taken) / len(claims):.2f} messages "
              f"each ({sum(1 for k in taken if k == 0):,} empty); "
              f"{spent:.2f} s in claims, {spent / seconds:.0%} of the drain; "
              f"per claim median {ordered[len(ordered) // 2] * 1000:.2f} ms, "
              f"p90 {ordered[int(len(ordered) * 0.9)] * 1000:.2f} ms")
    total = sum(statements.values())
    print(f"statements on the broker's engine: {total:,}; transactions: "
          f"{transactions['BEGIN']:,} begun, {transactions['COMMIT']:,} committed")
    print("     count   per claim  ms each  statement")
    for what, k in statements.most_common(15):
        per_claim = f"{k / len(claims):6.2f}/claim" if claims else ""
        ms = 1000 * statement_seconds[what] / k
        print(f"  {k:>8,} {per_claim} {ms:8.2f}  {what}")
    if profile is None:
        return
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats(sort).print_stats(top)
    print(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", default="postgresql",
                        choices=["postgresql", "mysql", "sqlite"])
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--channels", type=int, default=1000)
    parser.add_argument("--limit", type=int, default=2)
    parser.add_argument("--workers", type=int, default=channels_benchmark.WORKERS,
                        help="the subscriber's max_workers (benchmarks.channels --workers)")
    parser.add_argument("--top", type=int, default=30,
                        help="functions to list by cumulative time; 0: no cProfile")
    parser.add_argument("--plain", action="store_true", help="profile the plain drain")
    parser.add_argument("--sort", default="cumulative",
                        help="the functions' order (pstats: cumulative, tottime, ...)")
    parser.add_argument("--hot", action="store_true",
                        help="all messages on one channel without limits (the hot channel)")
    args = parser.parse_args()
    channels_benchmark.WORKERS = args.workers

    async def run() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            target = channel_targets([args.database], Path(tmp))[args.database]
            await ensure_database(args.database)
            await reset_our_schema(target.url)
            await profiled_drain(target.url, args.size, args.channels, args.limit,
                                 args.plain, args.top, args.hot, args.sort)
            await clear_all(target.url)

    asyncio.run(run())


if __name__ == "__main__":
    main()
