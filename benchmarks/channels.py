"""Channels against the plain drain, measured in the same run:
`python -m benchmarks.channels [--databases postgresql mysql sqlite] [--size N] [--repeats R]`.

1. **Many channels.** N messages (default 20,000) spread round-robin over 1,000
   channels, each limited to 2 at a time (the queue's `channel_max_concurrency`),
   drained by one subscriber with a no-op handler and the drain's options
   (`max_workers=8`, or `--workers`, claims 100-1000), against the plain drain of N messages without
   channels. Runs alternate plain, channelled, plain, ..., plain; each channelled run
   is compared with the geometric mean of the plain runs on either side, and the ratio
   is the median of those (issue 22's target: at least 0.5 on PostgreSQL and MariaDB).
2. **Hot channel.** 100,000 messages on channel "hot", published first, then 100
   channels of 10; no limits (channels alone make them take turns). Reported: seconds
   from `start()` until the handler has run for the last message of the small
   channels, how many messages had been handled by then, and the whole drain, against
   a plain FIFO run of the same 101,000 messages without channels (where the small
   ones, published last, are handled at the end). Runs alternate plain, channelled.
3. **Keys** (`--scenarios keys`, not run by default). N messages over 1,000 ordering
   keys (`--keys`), no channels, then over as many channels limited to one at a time:
   the same one-at-a-time, oldest-first order per key, through the plain claim (keys
   handed on as each message settles, prefetch allowed) and through the channel claim.
   Each against plain runs beside it, as in 1.

Each database gets a database of its own on the servers (`fsqla_bench_channels`,
so nothing collides with `benchmarks.run`), a fresh schema at the start, and emptied
tables before every run. `--url` runs on one database as it is (its tables are
emptied, its schema kept): the smoke test uses its own database that way. The machine's
cores are shared with whatever else runs: one run is one reading.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from faststream_sqla import Envelope, SqlaBroker
from faststream_sqla.channels.store import set_limits

from .common import (
    DATABASES,
    DEFAULT_CLAIMS,
    LABELS,
    MYSQL_SERVER,
    PG_SERVER,
    QUEUE,
    CountDown,
    Target,
    claim_options,
    clear_ours,
    clear_tables,
    create_database,
    drain_timeout,
    over_neighbours,
    rate,
    reset_our_schema,
)
from .ours import MAX_WORKERS, drain_once, our_driver, preinsert, verify_drained

DATABASE = "fsqla_bench_channels"
CHUNK = 1000  # messages per publish_batch call, as preinsert publishes


# -- targets ---------------------------------------------------------------------------
def channel_targets(databases: list[str], tmpdir: Path) -> dict[str, Target]:
    """Our own database per server (other benchmarks use fsqla_bench), a file for SQLite."""
    urls = {
        "sqlite": f"sqlite+aiosqlite:///{tmpdir / 'channels.db'}",
        "postgresql": f"{PG_SERVER}/{DATABASE}",
        "mysql": f"{MYSQL_SERVER}/{DATABASE}",
    }
    return {db: Target(db, urls[db], urls[db]) for db in databases}


async def ensure_database(database: str) -> None:
    """Create fsqla_bench_channels on a server if missing."""
    await create_database(database, DATABASE)


def database_of(url: str) -> str:
    name = make_url(url).get_backend_name()
    if name in ("mysql", "mariadb"):
        return "mysql"
    if name not in DATABASES:
        raise SystemExit(f"--url: unknown database {name!r}; choose from {', '.join(DATABASES)}")
    return name


async def clear_all(url: str) -> None:
    """No messages and no controls: a plain run must not find the last run's limits
    (they would switch the queue to the channel claim)."""
    await clear_ours(url)
    await clear_tables(url, "message_controls")


#: the subscriber's workers in both runs of a comparison (--workers)
WORKERS = MAX_WORKERS


def subscriber_options() -> dict[str, Any]:
    """The drain's subscriber options (benchmarks.ours.subscribe_no_op_handler)."""
    return {"max_workers": WORKERS, **claim_options(DEFAULT_CLAIMS)}


# -- many channels ---------------------------------------------------------------------
def channel_name(i: int) -> str:
    return f"c{i:04d}"


def publish_over_channels(
    channels: int, limit: int
) -> Callable[[str, int], Awaitable[None]]:
    """drain_once's `publish`: the queue's default limit for its channels, then bodies
    0..n-1, message i on channel i % `channels`."""

    async def publish(url: str, n: int) -> None:
        await clear_tables(url, "message_controls")
        async with our_driver(url) as (engine, driver):
            await set_limits(driver, engine, QUEUE, channel_max_concurrency=limit)
        async with SqlaBroker(url, logger=None) as broker:
            for start in range(0, n, CHUNK):
                await broker.publish_batch(
                    *(
                        Envelope(i, channel=channel_name(i % channels))
                        for i in range(start, min(n, start + CHUNK))
                    ),
                    queue=QUEUE,
                )

    return publish


async def publish_plain(url: str, n: int) -> None:
    await clear_tables(url, "message_controls")
    await preinsert(url, n)


def _checked(run: dict[str, Any], what: str) -> dict[str, Any]:
    if run["problem"]:
        raise RuntimeError(f"{what}: {run['problem']}")
    return run


async def many_channels(
    url: str, n: int, channels: int, limit: int, repeats: int
) -> dict[str, Any]:
    """Plain, channelled, plain, ..., plain: `repeats` channelled runs, each between two
    plain ones."""
    return {
        "channels": channels,
        "channel_max_concurrency": limit,
        **await against_plain(url, n, publish_over_channels(channels, limit), repeats),
    }


def publish_over_keys(keys: int) -> Callable[[str, int], Awaitable[None]]:
    """drain_once's `publish`: bodies 0..n-1, message i with ordering key i % `keys`,
    no channels."""

    async def publish(url: str, n: int) -> None:
        await clear_tables(url, "message_controls")
        async with SqlaBroker(url, logger=None) as broker:
            for start in range(0, n, CHUNK):
                await broker.publish_batch(
                    *(
                        Envelope(i, ordering_key=f"k{i % keys:04d}")
                        for i in range(start, min(n, start + CHUNK))
                    ),
                    queue=QUEUE,
                )

    return publish


async def keys_beside_channels(url: str, n: int, keys: int, repeats: int) -> dict[str, Any]:
    """The same backlog over `keys` ordering keys (the plain claim, keys handed on as
    each message settles) and over as many channels limited to one at a time (the
    channel claim), each against plain runs beside it."""
    return {
        "keys": keys,
        "ordering_keys": await against_plain(url, n, publish_over_keys(keys), repeats),
        "channels_of_one": await against_plain(
            url, n, publish_over_channels(keys, 1), repeats
        ),
    }


async def against_plain(
    url: str, n: int, publish: Callable[[str, int], Awaitable[None]], repeats: int
) -> dict[str, Any]:
    """Plain, `publish`ed, plain, ..., plain: `repeats` runs of `publish`'s backlog,
    each between two plain ones."""
    await drain_once(url, min(n, 500), claims=DEFAULT_CLAIMS, publish=publish_plain, workers=WORKERS)  # warm-up
    plain: list[dict[str, Any]] = []
    channelled: list[dict[str, Any]] = []
    ratios: list[float] = []

    async def plain_run() -> None:
        run = await drain_once(url, n, claims=DEFAULT_CLAIMS, publish=publish_plain, workers=WORKERS)
        plain.append(_checked(run, "plain drain"))

    await plain_run()
    for _ in range(repeats):
        run = await drain_once(url, n, claims=DEFAULT_CLAIMS, publish=publish, workers=WORKERS)
        channelled.append(_checked(run, "channelled drain"))
        await plain_run()
        ratios.append(
            over_neighbours(
                channelled[-1]["msg_per_s"], plain[-2]["msg_per_s"], plain[-1]["msg_per_s"]
            )
        )
    plain_rates = [r["msg_per_s"] for r in plain]
    channel_rates = [r["msg_per_s"] for r in channelled]

    def server_cpu(runs: list[dict[str, Any]]) -> float | None:
        values = [r["server_cpu_us_per_msg"] for r in runs if r["server_cpu_us_per_msg"]]
        return statistics.median(values) if values else None

    return {
        "n": n,
        "options": subscriber_options(),
        "plain_msg_per_s": statistics.median(plain_rates),
        "channels_msg_per_s": statistics.median(channel_rates),
        "ratio": statistics.median(ratios),
        "ratio_of_medians": statistics.median(channel_rates) / statistics.median(plain_rates),
        "plain_runs_msg_per_s": plain_rates,
        "channels_runs_msg_per_s": channel_rates,
        "pair_ratios": ratios,
        "plain_server_cpu_us_per_msg": server_cpu(plain),
        "channels_server_cpu_us_per_msg": server_cpu(channelled),
        "ratio_of": "median over channelled runs of its rate / geometric mean of the plain "
        "runs just before and after",
    }


# -- hot channel -----------------------------------------------------------------------
def small_channel(i: int) -> str:
    return f"s{i:03d}"


async def publish_hot(
    url: str, hot: int, small_channels: int, small_size: int, *, channelled: bool
) -> None:
    """Bodies 0..hot-1 (channel "hot"), then each small channel's `small_size` bodies,
    numbered on from `hot`; without channels when not `channelled`, in the same order
    and the same calls."""
    async with SqlaBroker(url, logger=None) as broker:
        for start in range(0, hot, CHUNK):
            bodies = range(start, min(hot, start + CHUNK))
            if channelled:
                await broker.publish_batch(*bodies, queue=QUEUE, channel="hot")
            else:
                await broker.publish_batch(*bodies, queue=QUEUE)
        body = hot
        for i in range(small_channels):
            bodies = range(body, body + small_size)
            body += small_size
            if channelled:
                await broker.publish_batch(*bodies, queue=QUEUE, channel=small_channel(i))
            else:
                await broker.publish_batch(*bodies, queue=QUEUE)


async def hot_once(
    url: str, hot: int, small_channels: int, small_size: int, *, channelled: bool
) -> dict[str, Any]:
    """One drain of the hot backlog and the small channels: when the last small message
    was handled, and when everything was."""
    await clear_all(url)
    total = hot + small_channels * small_size
    small_total = small_channels * small_size
    broker = SqlaBroker(url, logger=None)
    countdown = CountDown(total)
    small_seen = 0
    small_done_at: float | None = None
    handled_by_then = 0

    @broker.subscriber(QUEUE, **subscriber_options())
    async def handle(body: int) -> None:
        nonlocal small_seen, small_done_at, handled_by_then
        countdown.hit()
        if body >= hot:  # a small channel's message: its body says so
            small_seen += 1
            if small_seen == small_total:
                small_done_at = time.perf_counter()
                handled_by_then = countdown.count

    await publish_hot(url, hot, small_channels, small_size, channelled=channelled)
    await broker.connect()  # engine and schema check: not part of the drain
    t0 = time.perf_counter()
    try:
        await broker.start()
        await countdown.wait(drain_timeout(total))
    finally:
        await broker.stop()
    elapsed = time.perf_counter() - t0
    problem = await verify_drained(url, total)
    if problem:
        raise RuntimeError(f"hot channel ({'channels' if channelled else 'plain'}): {problem}")
    assert small_done_at is not None  # every message was handled
    return {
        "small_done_s": small_done_at - t0,
        "handled_by_then": handled_by_then,
        "total_s": elapsed,
        "msg_per_s": rate(total, elapsed),
    }


async def hot_channel(
    url: str, hot: int, small_channels: int, small_size: int, repeats: int
) -> dict[str, Any]:
    """Plain, channelled, `repeats` times; medians of each."""
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "channels": []}
    for _ in range(repeats):
        for kind in ("plain", "channels"):
            runs[kind].append(
                await hot_once(
                    url, hot, small_channels, small_size, channelled=kind == "channels"
                )
            )
    out: dict[str, Any] = {
        "hot": hot,
        "small_channels": small_channels,
        "small_size": small_size,
        "options": subscriber_options(),
    }
    for kind, kind_runs in runs.items():
        for key in ("small_done_s", "handled_by_then", "total_s", "msg_per_s"):
            values = [r[key] for r in kind_runs]
            out[f"{kind}_{key}"] = statistics.median(values)
            out[f"{kind}_runs_{key}"] = values
    out["small_done_ratio"] = out["channels_small_done_s"] / out["plain_small_done_s"]
    out["total_ratio"] = out["channels_total_s"] / out["plain_total_s"]
    return out


# -- the report ------------------------------------------------------------------------
def print_report(results: dict[str, Any]) -> None:
    many = {db: r["many"] for db, r in results["databases"].items() if "many" in r}
    hot = {db: r["hot"] for db, r in results["databases"].items() if "hot" in r}
    repeats = results["repeats"]
    if many:
        first = next(iter(many.values()))
        print(
            f"\nMany channels: {first['n']:,} messages over {first['channels']:,} channels, "
            f"channel_max_concurrency={first['channel_max_concurrency']}, "
            f"max_workers={WORKERS}; medians of {repeats} channelled runs and "
            f"{repeats + 1} plain runs"
        )
        print(f"  {'database':<11} {'plain msg/s':>12} {'channels msg/s':>15} "
              f"{'ratio (paired)':>15}  pairs")
        for db, r in many.items():
            pairs = " ".join(f"{x:.2f}" for x in r["pair_ratios"])
            print(f"  {LABELS[db]:<11} {r['plain_msg_per_s']:>12,.0f} "
                  f"{r['channels_msg_per_s']:>15,.0f} {r['ratio']:>14.2f}x  {pairs}")
    if hot:
        first = next(iter(hot.values()))
        total = first["hot"] + first["small_channels"] * first["small_size"]
        print(
            f"\nHot channel: {first['hot']:,} on \"hot\", then {first['small_channels']} "
            f"channels of {first['small_size']} ({total:,} in all), no limits; "
            f"medians of {repeats} runs each; small done = seconds from start() until the "
            "last small-channel message was handled (messages handled by then)"
        )
        print(f"  {'database':<11} {'plain: small done':>22} {'total':>8} "
              f"{'channels: small done':>22} {'total':>8} {'small done':>11} {'total':>7}")
        for db, r in hot.items():
            print(
                f"  {LABELS[db]:<11} "
                f"{r['plain_small_done_s']:>8.2f} s ({r['plain_handled_by_then']:>9,.0f}) "
                f"{r['plain_total_s']:>6.1f} s "
                f"{r['channels_small_done_s']:>8.2f} s ({r['channels_handled_by_then']:>9,.0f}) "
                f"{r['channels_total_s']:>6.1f} s "
                f"{r['small_done_ratio']:>10.3f}x {r['total_ratio']:>6.2f}x"
            )
    keyed = {db: r["keys"] for db, r in results["databases"].items() if "keys" in r}
    if keyed:
        first = next(iter(keyed.values()))
        print(
            f"\nOrdering keys beside channels of one: {first['ordering_keys']['n']:,} "
            f"messages over {first['keys']:,} ordering keys (the plain claim), and over as "
            f"many channels with channel_max_concurrency=1 (the channel claim); "
            f"max_workers={WORKERS}; each against plain runs beside it"
        )
        print(f"  {'database':<11} {'keys msg/s':>11} {'ratio':>7}  pairs"
              f"{'':<16} {'channels msg/s':>15} {'ratio':>7}  pairs")
        for db, r in keyed.items():
            k, c = r["ordering_keys"], r["channels_of_one"]
            print(
                f"  {LABELS[db]:<11} {k['channels_msg_per_s']:>11,.0f} {k['ratio']:>6.2f}x  "
                f"{' '.join(f'{x:.2f}' for x in k['pair_ratios']):<20} "
                f"{c['channels_msg_per_s']:>15,.0f} {c['ratio']:>6.2f}x  "
                f"{' '.join(f'{x:.2f}' for x in c['pair_ratios'])}"
            )
    for error in results["errors"]:
        print(f"  ! {error['database']}/{error['scenario']}: {error['error']}")


async def main(args: argparse.Namespace) -> dict[str, Any]:
    global WORKERS
    WORKERS = args.workers
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "repeats": args.repeats,
        "databases": {},
        "errors": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        if args.url:
            targets = {database_of(args.url): Target(database_of(args.url), args.url, args.url)}
        else:
            targets = channel_targets(args.databases, Path(tmp))
        for db, target in targets.items():
            if not args.url:
                await ensure_database(db)
                await reset_our_schema(target.url)
            found: dict[str, Any] = {}
            results["databases"][db] = found
            runs: dict[str, Callable[[], Awaitable[dict[str, Any]]]] = {
                "many": partial(many_channels, target.url, args.size, args.channels,
                                args.limit, args.repeats),
                "hot": partial(hot_channel, target.url, args.hot, args.small_channels,
                               args.small_size, args.repeats),
                "keys": partial(keys_beside_channels, target.url, args.size, args.keys,
                                args.repeats),
            }
            for name in args.scenarios:
                print(f"{LABELS[db]}: {name} ...", file=sys.stderr, flush=True)
                try:
                    found[name] = await runs[name]()
                except Exception as e:  # report and keep going
                    results["errors"].append(
                        {"database": db, "scenario": name, "error": f"{type(e).__name__}: {e}"}
                    )
                    print(f"  ! {db}/{name}: {type(e).__name__}: {e}", file=sys.stderr)
            await clear_all(target.url)
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--databases", nargs="+", default=["postgresql", "mysql", "sqlite"],
                        choices=DATABASES)
    parser.add_argument("--url", help="run on this database only, as it is (tables emptied)")
    parser.add_argument("--scenarios", nargs="+", default=["many", "hot"],
                        choices=["many", "hot", "keys"])
    parser.add_argument("--size", type=int, default=20_000,
                        help="many channels: messages (default 20,000)")
    parser.add_argument("--channels", type=int, default=1000,
                        help="many channels: channels (default 1,000)")
    parser.add_argument("--limit", type=int, default=2,
                        help="many channels: each channel's max_concurrency (default 2)")
    parser.add_argument("--keys", type=int, default=1000,
                        help="keys: ordering keys, and channels of one (default 1,000)")
    parser.add_argument("--hot", type=int, default=100_000,
                        help="hot channel: messages on it (default 100,000)")
    parser.add_argument("--small-channels", type=int, default=100,
                        help="hot channel: small channels after it (default 100)")
    parser.add_argument("--small-size", type=int, default=10,
                        help="hot channel: messages per small channel (default 10)")
    parser.add_argument("--workers", type=int, default=MAX_WORKERS,
                        help=f"max_workers of the subscriber in every run (default {MAX_WORKERS})")
    parser.add_argument("--repeats", type=int, default=3,
                        help="channelled runs per scenario, each alternating with plain ones")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    args = parser.parse_args(argv)
    for name in (
        "size", "channels", "limit", "keys", "hot", "small_channels", "small_size", "repeats", "workers"
    ):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    figures = asyncio.run(main(arguments))
    print_report(figures)
    if arguments.json:
        arguments.json.write_text(json.dumps(figures, indent=1))
    sys.exit(1 if figures["errors"] else 0)
