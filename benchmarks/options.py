"""Message options against the plain path, each as a ratio measured in the same run.

- ordering keys: a drain of messages spread over many ordering keys (published
  interleaved, as traffic about many entities arrives) over a plain drain of as many;
- priorities: the claim+archive rate with a big backlog mixed over the eleven
  priorities over the same with a small one;
- idempotency keys: publish_batch(1000) with a key per message over plain
  publish_batch(1000);
- fast_publish (PostgreSQL): sequential publish() with it over without.

Each keyed run is set between two plain runs and divided by their geometric mean
(`over_neighbours`), so a machine whose speed drifts moves both sides alike.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from faststream_sqla import Envelope, SqlaBroker
from faststream_sqla.migrations import downgrade_schema, upgrade_schema
from faststream_sqla.schema import PRIORITIES, TableNames

from .common import QUEUE, Results, Target, clear_ours, clear_tables, over_neighbours, rate
from .ours import SYSTEM, _backlog_sql, _execute_all, claim_archive_loop, drain_once

SMALL_PRIORITY_TABLES = TableNames("bench_prio_small_message", "bench_prio_small_archive")
BIG_PRIORITY_TABLES = TableNames("bench_prio_big_message", "bench_prio_big_archive")
RATIO_OF = "median over pairs of the keyed run / geometric mean of the plain runs around it"


def keyed_publisher(keys: int):  # noqa: ANN201
    async def publish(url: str, n: int) -> None:
        async with SqlaBroker(url, logger=None) as broker:
            for start in range(0, n, 1000):
                await broker.publish_batch(
                    *(Envelope(i, ordering_key=f"k{i % keys}") for i in range(start, min(n, start + 1000))),
                    queue=QUEUE,
                )

    return publish


async def run_ordering_keys(target: Target, keys: int, per_key: int, pairs: int,
                            results: Results) -> None:
    n = keys * per_key

    async def plain() -> float:
        return (await drain_once(target.url, n, claims="100-1000"))["msg_per_s"]

    async def keyed() -> float:
        drained = await drain_once(target.url, n, claims="100-1000", publish=keyed_publisher(keys))
        if drained["problem"]:
            results.error("options", target.database, "ordering keys", drained["problem"])
        return drained["msg_per_s"]

    ratios, keyed_rates, plain_rates = await _alternate(plain, keyed, pairs)
    db = target.database
    results.add(SYSTEM, "options", "ordering_keys_drain_msg_per_s", db,
                statistics.median(keyed_rates), "msg/s", keys=keys, per_key=per_key)
    results.add(SYSTEM, "options", "ordering_keys_over_plain_drain", db,
                statistics.median(ratios), "x", keys=keys, per_key=per_key, pair_ratios=ratios,
                plain_msg_per_s=plain_rates, ratio_of=RATIO_OF)


async def run_priorities(target: Target, small: int, big: int, claim_n: int, pairs: int,
                         results: Results, limit: int = 100) -> None:
    url, db = target.url, target.database
    levels = len(PRIORITIES)
    for tables in (SMALL_PRIORITY_TABLES, BIG_PRIORITY_TABLES):
        await downgrade_schema(url, message_table=tables.message, archive_table=tables.archive)
        await upgrade_schema(url, message_table=tables.message, archive_table=tables.archive)

    async def fill(tables: TableNames, backlog: int) -> None:
        await _execute_all(
            url, _backlog_sql(db, backlog, table=tables.message, priorities=levels),
            analyze=(tables.message,), tables=tables,
        )

    async def measure(tables: TableNames) -> float:
        await claim_archive_loop(url, min(10 * limit, claim_n // 2), limit, tables)  # warm
        return await claim_archive_loop(url, claim_n, limit, tables)

    async def small_run() -> float:
        await clear_tables(url, SMALL_PRIORITY_TABLES.message, keep_ids=True)
        await fill(SMALL_PRIORITY_TABLES, small)
        return await measure(SMALL_PRIORITY_TABLES)

    async def big_run() -> float:
        return await measure(BIG_PRIORITY_TABLES)

    try:
        await fill(BIG_PRIORITY_TABLES, big)
        ratios, big_rates, small_rates = await _alternate(small_run, big_run, pairs)
    finally:
        for tables in (SMALL_PRIORITY_TABLES, BIG_PRIORITY_TABLES):
            await downgrade_schema(url, message_table=tables.message,
                                   archive_table=tables.archive)
    results.add(SYSTEM, "options", "priorities_big_claim_archive_msg_per_s", db,
                statistics.median(big_rates), "msg/s", backlog=big, priorities=levels,
                limit=limit)
    results.add(SYSTEM, "options", "priorities_big_over_small", db, statistics.median(ratios),
                "x", backlog_small=small, backlog_big=big, priorities=levels,
                pair_ratios=ratios, small_msg_per_s=small_rates, ratio_of=RATIO_OF)


async def run_idempotent_publish(target: Target, n: int, pairs: int, results: Results) -> None:
    n = max(1000, n // 1000 * 1000)
    runs = iter(range(10**6))

    async def publish(keyed: bool) -> float:
        await clear_ours(target.url)
        run = next(runs)
        async with SqlaBroker(target.url, logger=None) as broker:
            await broker.publish_batch(*range(100), queue=QUEUE)  # connected and warm
            t0 = time.perf_counter()
            for start in range(0, n, 1000):
                bodies = range(start, start + 1000)
                if keyed:
                    await broker.publish_batch(
                        *(Envelope(i, idempotency_key=f"{run}-{i}") for i in bodies), queue=QUEUE
                    )
                else:
                    await broker.publish_batch(*bodies, queue=QUEUE)
            return rate(n, time.perf_counter() - t0)

    ratios, keyed_rates, plain_rates = await _alternate(
        lambda: publish(False), lambda: publish(True), pairs
    )
    await clear_ours(target.url)
    db = target.database
    results.add(SYSTEM, "options", "idempotent_publish_batch_msg_per_s", db,
                statistics.median(keyed_rates), "msg/s", n=n, batch=1000)
    results.add(SYSTEM, "options", "idempotent_over_plain_publish_batch", db,
                statistics.median(ratios), "x", n=n, pair_ratios=ratios,
                plain_msg_per_s=plain_rates, ratio_of=RATIO_OF)


async def run_fast_publish(target: Target, n: int, pairs: int, results: Results) -> None:
    async def publish(fast: bool) -> float:
        await clear_ours(target.url)
        async with SqlaBroker(target.url, logger=None, fast_publish=fast) as broker:
            for i in range(20):  # warm-up
                await broker.publish(i, queue=QUEUE)
            t0 = time.perf_counter()
            for i in range(n):
                await broker.publish(i, queue=QUEUE)
            return rate(n, time.perf_counter() - t0)

    ratios, fast_rates, plain_rates = await _alternate(
        lambda: publish(False), lambda: publish(True), pairs
    )
    await clear_ours(target.url)
    db = target.database
    results.add(SYSTEM, "options", "fast_publish_single_msg_per_s", db,
                statistics.median(fast_rates), "msg/s", n=n)
    results.add(SYSTEM, "options", "fast_over_plain_publish_single", db,
                statistics.median(ratios), "x", n=n, pair_ratios=ratios,
                plain_msg_per_s=plain_rates, ratio_of=RATIO_OF)


async def _alternate(plain, keyed, pairs: int) -> tuple[list[float], list[float], list[float]]:  # noqa: ANN001
    """plain, keyed, plain, keyed, ..., plain: each keyed rate over its neighbours'."""
    plain_rates = [await plain()]
    keyed_rates: list[float] = []
    ratios: list[float] = []
    for _ in range(pairs):
        keyed_rates.append(await keyed())
        plain_rates.append(await plain())
        ratios.append(over_neighbours(keyed_rates[-1], plain_rates[-2], plain_rates[-1]))
    return ratios, keyed_rates, plain_rates


async def run_options(target: Target, sizes: dict[str, Any], results: Results) -> None:
    pairs = int(sizes["options_pairs"])
    steps = (
        ("ordering keys", lambda: run_ordering_keys(
            target, sizes["options_keys"], sizes["options_per_key"], pairs, results)),
        ("priorities", lambda: run_priorities(
            target, sizes["options_priority_small"], sizes["options_priority_big"],
            sizes["options_priority_claim"], pairs, results)),
        ("idempotency keys", lambda: run_idempotent_publish(
            target, sizes["options_publish"], pairs, results)),
    )
    if target.database == "postgresql":
        steps += (("fast_publish", lambda: run_fast_publish(
            target, sizes["options_fast_single"], pairs, results)),)
    for what, step in steps:
        try:
            await step()
        except Exception as e:  # noqa: BLE001 (one option's failure is reported, not fatal)
            results.error("options", target.database, what, e)
