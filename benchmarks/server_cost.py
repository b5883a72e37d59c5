"""The database server's CPU a message: the broker's claim and outcome statements
against the raw loop's, at claims of 100 and 1000 (the default claims' smallest and
largest).

PostgreSQL and MariaDB only: SQLite's work runs in the consumer's own process. Each
drain empties the same kind of backlog (generated in the database, then left to settle)
with no handler and no FastStream: the raw loop of raw.py (claim with SKIP LOCKED, move
to the archive) on its tables, and the broker's dialect (its claim, then one
acknowledged outcome write per claim) on ours. The server's CPU is read from /proc
around each drain. Raw and ours alternate, three rounds per batch size, and the ratio
is the median of ours / raw over the rounds.

Why it is here: two worker processes share the machine's cores with the server, so the
server's CPU a message bounds what a second process adds (see `processes`), and a
broker cannot do less row work per message than the raw loop does.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Awaitable
from contextlib import AbstractAsyncContextManager
from typing import Any

from faststream_sqla.schema import TableNames

from . import raw
from .common import (
    SERVER_COST_BATCH_SIZES,
    Results,
    Target,
    clear_ours,
    server_cost_metric,
    server_cpu_seconds,
)
from .ours import _backlog_sql, _execute_all, claim_and_ack, our_dialect

SCENARIO = "server-cost"
ROUNDS = 3
RAW_TABLES = TableNames(raw.MSG, raw.ARCH)


async def _server_us_per_msg(target: Target, n: int, drain: Awaitable[None]) -> float:
    before = server_cpu_seconds(target.database)
    await drain
    after = server_cpu_seconds(target.database)
    if before is None or after is None:
        msg = "the server's CPU cannot be read from /proc on this machine"
        raise RuntimeError(msg)
    return 1e6 * (after - before) / n


async def raw_drain(target: Target, n: int, limit: int) -> float:
    await raw.create_raw_tables(target.url)
    await _execute_all(target.url, _backlog_sql(target.database, n, table=raw.MSG),
                       analyze=(raw.MSG,), tables=RAW_TABLES)
    loop = await raw.open_raw(target)

    async def drain() -> None:
        done = 0
        while done < n and (got := await loop.claim_and_archive(min(limit, n - done))):
            done += got
        if done != n:
            msg = f"the raw loop claimed {done} of {n}"
            raise RuntimeError(msg)

    try:
        return await _server_us_per_msg(target, n, drain())
    finally:
        await loop.close()


async def ours_drain(
    target: Target,
    n: int,
    limit: int,
    during: AbstractAsyncContextManager[Any] | None = None,
) -> float:
    """`during` is entered once the backlog is settled and the dialect prepared, and
    left when the drain ends (benchmarks.server_profile samples the server there)."""
    await clear_ours(target.url)
    await _execute_all(target.url, _backlog_sql(target.database, n), analyze=("message",))
    # connected and prepared before the clock, as the raw loop's connection is
    async with our_dialect(target.url) as (engine, dialect):
        async with during or contextlib.nullcontext():
            return await _server_us_per_msg(
                target, n, claim_and_ack(engine, dialect, n, limit)
            )


async def run_server_cost(target: Target, n: int, results: Results) -> None:
    db = target.database
    if db == "sqlite":
        return
    for limit in SERVER_COST_BATCH_SIZES:
        runs: dict[str, list[float]] = {"raw": [], "ours": []}
        for _ in range(ROUNDS):
            runs["raw"].append(await raw_drain(target, n, limit))
            runs["ours"].append(await ours_drain(target, n, limit))
        common = {"n": n, "fetch_batch_size": limit, "rounds": ROUNDS}
        per_msg = server_cost_metric("server_us_per_msg", limit)
        results.add("raw", SCENARIO, per_msg, db, statistics.median(runs["raw"]),
                    "µs/msg", runs=runs["raw"], **common)
        results.add("faststream-sqla", SCENARIO, per_msg, db,
                    statistics.median(runs["ours"]), "µs/msg", runs=runs["ours"], **common)
        # /proc counts CPU in 10 ms ticks: a short drain (--quick) can read none at all
        ratios = [o / r for o, r in zip(runs["ours"], runs["raw"], strict=True) if r > 0]
        results.add("faststream-sqla", SCENARIO, server_cost_metric("ours_over_raw", limit), db,
                    statistics.median(ratios) if ratios else None,
                    "x", ratio_of="median over rounds of ours / raw (lower is cheaper)",
                    rounds_with_a_reading=len(ratios), **common)
    await clear_ours(target.url)
    await raw.create_raw_tables(target.url)  # leaves them empty
