"""faststream-sqla itself: drain, batch drain, publish, latency and scale."""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from faststream.message import AckStatus
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from faststream_sqla import SqlaBroker, lifecycle
from faststream_sqla.drivers import driver_for
from faststream_sqla.drivers.base import Driver, Outcome
from faststream_sqla.exceptions import InvalidOptionError
from faststream_sqla.message import ClaimedMessage
from faststream_sqla.migrations import downgrade_schema, upgrade_schema
from faststream_sqla.retry import RetryStrategy
from faststream_sqla.schema import QueueTables, TableNames
from faststream_sqla.subscriber.config import ConsumeOptions, default_retry_strategy

from . import pipeline, raw
from .common import (
    DEFAULT_CLAIMS,
    QUEUE,
    CollectorActivity,
    CountDown,
    Results,
    Target,
    claim_options,
    clear_ours,
    clear_tables,
    count_rows,
    drain_timeout,
    over_neighbours,
    percentiles,
    rate,
    reset_our_schema,
    run_json_subprocess,
    send_timestamps_and_wait,
    server_cpu_seconds,
    silenced_access_log,
    timed_drain,
)

SYSTEM = "faststream-sqla"
MAX_WORKERS = 8
REPEATS = 5  # scale: median of this many timed claim runs (short, so noisy: more of them)
# scale: each backlog compared with the small one has tables of its own, so that all
# stand at once and their runs can alternate with the small backlog's (default tables)
BIG_BACKLOG_TABLES = TableNames("bench_big_message", "bench_big_message_archive")
BIG_ARCHIVE_TABLES = TableNames("bench_arch_message", "bench_arch_message_archive")
ONE_TIMESTAMP_TABLES = TableNames("bench_onets_message", "bench_onets_message_archive")
SCALE_TABLES = (BIG_BACKLOG_TABLES, BIG_ARCHIVE_TABLES, ONE_TIMESTAMP_TABLES)
RSS_CLAIMS = DEFAULT_CLAIMS  # scale: the RSS drain's claim sizes (the default)


class NotAvailable(Exception):
    """A feature this faststream-sqla does not have yet."""


async def preinsert(url: str, n: int, chunk: int = 1000) -> None:
    """N messages (bodies 0..N-1) through publish_batch, chunks of 1000."""
    async with SqlaBroker(url, logger=None) as broker:
        for start in range(0, n, chunk):
            await broker.publish_batch(*range(start, min(n, start + chunk)), queue=QUEUE)


async def verify_drained(url: str, n: int) -> str | None:
    engine = create_async_engine(url)
    try:
        left = await count_rows(engine, "message")
        done = await count_rows(engine, "message_archive", "WHERE state = 'COMPLETED'")
    finally:
        await engine.dispose()
    if left or done != n:
        return f"after the drain: {left} rows left in message, {done} of {n} archived COMPLETED"
    return None


def subscribe_no_op_handler(
    broker: SqlaBroker, countdown: CountDown, *, batch: bool, claims: str, **extra: Any
) -> dict:
    """Register the no-op handler, with `extra` subscriber options; returns the options
    used."""
    sizes = {**claim_options(claims), **extra}
    options: dict[str, Any] = {"max_workers": MAX_WORKERS, **sizes}
    if not batch:

        @broker.subscriber(QUEUE, **options)
        async def handle(body: int) -> None:
            countdown.hit()

        return options

    async def handle_batch(bodies: list[int]) -> None:
        countdown.hit(len(bodies))

    try:
        sub = broker.subscriber(QUEUE, batch=True, **options)  # type: ignore[call-arg]
    except TypeError as e:
        raise NotAvailable(f"subscriber(batch=True) is not supported yet ({e})") from e
    except InvalidOptionError:
        # a batch subscriber may refuse several workers: fall back to its defaults
        options = sizes
        sub = broker.subscriber(QUEUE, batch=True, **options)  # type: ignore[call-arg]
    sub(handle_batch)
    return options


async def drain_once(
    url: str,
    n: int,
    *,
    claims: str,
    batch: bool = False,
    access_log: bool = False,
    vacuum: bool = True,
    publish: Callable[[str, int], Awaitable[None]] | None = None,
    workers: int = MAX_WORKERS,
) -> dict[str, Any]:
    """Time start + handling n pre-inserted messages + stop (final flush). `publish`
    inserts them (default: `preinsert`, plain bodies 0..n-1).

    With `access_log`, the broker keeps FastStream's default logging (records formatted
    and written, to os.devnull), as an application started without options would.
    `vacuum` is the broker's `vacuum_message_table`.
    """
    await clear_ours(url)
    logging_options = {} if access_log else {"logger": None}
    broker = SqlaBroker(url, vacuum_message_table=vacuum, **logging_options)
    countdown = CountDown(n)
    # subscribe before inserting: a missing feature (n/a) shows up at once
    options = subscribe_no_op_handler(
        broker, countdown, batch=batch, claims=claims, max_workers=workers
    )
    await (publish or preinsert)(url, n)
    await broker.connect()  # engine and schema check: not part of the drain
    database = broker.engine.dialect.name
    server_before = server_cpu_seconds(database)
    collector = CollectorActivity()
    with silenced_access_log() if access_log else contextlib.nullcontext():
        elapsed = await timed_drain(broker, countdown, n, collector)
    server_after = server_cpu_seconds(database)
    problem = await verify_drained(url, n)
    return {
        "msg_per_s": rate(n, elapsed),
        "seconds": elapsed,
        "options": options,
        "vacuums": broker.config.vacuum.vacuums,
        "vacuums_skipped": broker.config.vacuum.skipped,
        "server_cpu_us_per_msg": (
            None if server_before is None or server_after is None
            else 1e6 * (server_after - server_before) / n
        ),
        "problem": problem,
        "full_collections": collector.full_collections,
    }


async def run_drain(
    target: Target,
    n: int,
    claim_specs: list[str],
    results: Results,
    *,
    batch: bool,
    repeats: int = 1,
) -> None:
    """Pick the best claim sizes (common.claim_options) with one drain each, then report
    the median of `repeats` fresh drains at those sizes (with repeats > 1, the pick's own
    luck does not count). The default-logging figure is a median of `repeats` too."""
    db = target.database
    scenario = "drain-batch" if batch else "drain"
    try:
        await drain_once(target.url, min(n, 500), claims=claim_specs[0], batch=batch)  # warm-up
    except NotAvailable as e:
        results.add(SYSTEM, scenario, "msg_per_s", db, None, "msg/s", status="n/a", reason=str(e))
        return
    runs: dict[str, dict[str, Any]] = {}
    for claims in claim_specs:
        try:
            runs[claims] = await drain_once(target.url, n, claims=claims, batch=batch)
        except Exception as e:  # noqa: BLE001 - report and keep going
            results.error(scenario, db, f"claims={claims}", e)
            continue
        if runs[claims]["problem"]:
            results.error(scenario, db, f"claims={claims}", runs[claims]["problem"])
    if not runs:
        results.add(SYSTEM, scenario, "msg_per_s", db, None, "msg/s", status="failed")
        return
    best = max(runs, key=lambda k: runs[k]["msg_per_s"])
    try:
        repeated = await _median_drain(target.url, n, best, batch, repeats, access_log=False)
    except Exception as e:  # noqa: BLE001 - report and keep going
        results.error(scenario, db, f"repeats at claims={best}", e)
        return
    results.add(
        SYSTEM,
        scenario,
        "msg_per_s",
        db,
        repeated["median"] if repeats > 1 else runs[best]["msg_per_s"],
        "msg/s",
        n=n,
        best_claims=best,
        options=runs[best]["options"],
        by_claims={k: v["msg_per_s"] for k, v in runs.items()},
        repeat_runs=repeated["runs"],
        # a full garbage collection inside a run slows it visibly (watched_collector)
        full_collections=(
            repeated["full_collections"] if repeats > 1 else [runs[best]["full_collections"]]
        ),
        logger=None,
    )
    if batch:
        return
    results.add(
        SYSTEM, scenario, "over_paired_pipeline", db, repeated["paired_median"], "x",
        n=n, claims=best, pairs=repeated["paired_ratios"], logger=None,
    )
    # The same drain as an application started without options runs it: FastStream's
    # access log on, compared with FastStream's own pipeline with its access log on.
    try:
        logged = await _median_drain(target.url, n, best, batch, repeats, access_log=True)
    except Exception as e:  # noqa: BLE001 - report and keep going
        results.error(scenario, db, "default logging", e)
        return
    results.add(
        SYSTEM, scenario, "access_log_msg_per_s", db, logged["median"], "msg/s",
        n=n, claims=best, repeat_runs=logged["runs"], log_stream=os.devnull,
    )
    results.add(
        SYSTEM, scenario, "access_log_over_paired_pipeline", db, logged["paired_median"], "x",
        n=n, claims=best, pairs=logged["paired_ratios"], log_stream=os.devnull,
    )


async def _median_drain(
    url: str, n: int, claims: str, batch: bool, repeats: int, *, access_log: bool
) -> dict[str, Any]:
    """Median of `repeats` drains. Single-message drains are each bracketed by
    measurements of FastStream's pipeline (same logging), one just before and one just
    after (shared with the next drain), and `paired_median` is the median over drains of
    drain / geometric mean of its two brackets: on a machine whose speed drifts, a
    baseline measured minutes earlier can flatter or sink a ratio, and one measured on
    one side only still moves with a drift that runs through the pair.
    """
    rates, ratios, full_collections = [], [], []
    with tempfile.TemporaryDirectory() as tmp:

        async def baseline() -> float:
            return await pipeline.measure(n, access_log=access_log, tmpdir=Path(tmp))

        before = None if batch else await baseline()
        for _ in range(repeats):
            run = await drain_once(url, n, claims=claims, batch=batch, access_log=access_log)
            if run["problem"]:
                raise RuntimeError(run["problem"])
            rates.append(run["msg_per_s"])
            full_collections.append(run["full_collections"])
            if before is not None:
                after = await baseline()
                ratios.append(over_neighbours(run["msg_per_s"], before, after))
                before = after
    return {
        "median": statistics.median(rates),
        "runs": rates,
        "full_collections": full_collections,
        "paired_median": statistics.median(ratios) if ratios else None,
        "paired_ratios": ratios,
    }


# -- publish ----------------------------------------------------------------------------
async def run_sustained(target: Target, n: int, results: Results) -> None:
    """A long drain, with and without the broker vacuuming its message table.

    Drains of 20,000 end before the dead entries they leave cost much; a queue that
    keeps busy for minutes pays for them on every claim until a vacuum. Runs alternate,
    off, on, off, on, off; each run with vacuums is compared with the geometric mean of
    the runs without on either side, and the ratio is the median of those.
    """
    db = target.database
    runs: dict[bool, list[float]] = {False: [], True: []}
    server_cpu: dict[bool, list[float]] = {False: [], True: []}
    vacuums: list[int] = []
    ratios = []
    order = [False, True, False, True, False]
    for i, vacuum in enumerate(order):
        done = await drain_once(target.url, n, claims=DEFAULT_CLAIMS, vacuum=vacuum)
        if done["problem"]:
            results.error("sustained", db, f"vacuum={vacuum}", done["problem"])
            return
        runs[vacuum].append(done["msg_per_s"])
        if done["server_cpu_us_per_msg"] is not None:
            server_cpu[vacuum].append(done["server_cpu_us_per_msg"])
        if vacuum:
            vacuums.append(done["vacuums"])
        if i >= 2 and not vacuum:
            ratios.append(over_neighbours(runs[True][-1], runs[False][-2], runs[False][-1]))
    common = {"n": n, "claims": DEFAULT_CLAIMS, "max_workers": MAX_WORKERS}
    results.add(SYSTEM, "sustained", "vacuum_off_msg_per_s", db,
                statistics.median(runs[False]), "msg/s", runs=runs[False], **common)
    results.add(SYSTEM, "sustained", "vacuum_on_msg_per_s", db,
                statistics.median(runs[True]), "msg/s", runs=runs[True],
                vacuums_per_drain=vacuums, **common)
    for vacuum, label in ((False, "off"), (True, "on")):
        if server_cpu[vacuum]:
            results.add(SYSTEM, "sustained", f"vacuum_{label}_server_us_per_msg", db,
                        statistics.median(server_cpu[vacuum]), "µs/msg",
                        runs=server_cpu[vacuum], what="the database server's CPU (all its "
                        "processes, /proc) during the drain, per message", **common)
    results.add(SYSTEM, "sustained", "vacuum_on_over_off", db, statistics.median(ratios), "x",
                pair_ratios=ratios, ratio_of="median over runs with vacuums of the rate / "
                "geometric mean of the runs without just before and after", **common)


PUBLISH_PAIRS = 3  # publish_batch runs, each between two raw insert runs


async def run_publish(target: Target, n_single: int, n_batch: int, results: Results) -> None:
    db = target.database
    await clear_ours(target.url)
    await raw.create_raw_tables(target.url)
    inserter = await raw.open_raw(target)
    n_batch = max(1000, n_batch // 1000 * 1000)

    async def raw_inserts() -> float:
        """The raw insert ceiling measured now, on empty tables like ours."""
        await raw.clear_raw(target.url)
        t0 = time.perf_counter()
        for start in range(0, n_batch, 1000):
            await inserter.insert(start, 1000)
        return rate(n_batch, time.perf_counter() - t0)

    try:
        async with SqlaBroker(target.url, logger=None) as broker:
            for i in range(20):  # warm-up
                await broker.publish(i, queue=QUEUE)
            await broker.publish_batch(*range(1000), queue=QUEUE)
            await clear_ours(target.url)

            t0 = time.perf_counter()
            for i in range(n_single):
                await broker.publish(i, queue=QUEUE)
            single = rate(n_single, time.perf_counter() - t0)
            stored = await count_rows(broker.engine, "message")
            if stored != n_single:
                results.error("publish", db, "count", f"{stored} rows stored, {n_single} sent")

            # R B R B R B R: each publish_batch run against the geometric mean of the raw
            # insert runs on either side, as the drains are paired with the pipeline
            batches, pairs = [], []
            before = await raw_inserts()
            for _ in range(PUBLISH_PAIRS):
                await clear_ours(target.url)
                t0 = time.perf_counter()
                for start in range(0, n_batch, 1000):
                    await broker.publish_batch(*range(start, start + 1000), queue=QUEUE)
                batches.append(rate(n_batch, time.perf_counter() - t0))
                stored = await count_rows(broker.engine, "message")
                if stored != n_batch:
                    results.error("publish", db, "count",
                                  f"{stored} rows stored, {n_batch} sent in batches")
                after = await raw_inserts()
                pairs.append(over_neighbours(batches[-1], before, after))
                before = after
    finally:
        await inserter.close()
        await raw.clear_raw(target.url)
    await clear_ours(target.url)
    results.add(SYSTEM, "publish", "single_msg_per_s", db, single, "msg/s", n=n_single)
    results.add(SYSTEM, "publish", "batch_msg_per_s", db, statistics.median(batches), "msg/s",
                n=n_batch, batch=1000, runs=batches)
    results.add(SYSTEM, "publish", "batch_over_paired_raw", db, statistics.median(pairs), "x",
                pairs=pairs, ratio_of="median over publish_batch runs of the rate / geometric "
                "mean of the raw insert runs just before and after")


# -- latency ----------------------------------------------------------------------------
def cross_process_wakeup(driver: Driver) -> bool:
    """Whether this driver wakes consumers in other processes (LISTEN/NOTIFY)."""
    if getattr(driver, "supports_notifications", False):
        return True
    for name in ("listener", "after_publish"):  # the hook, whichever this version has
        own, base = getattr(type(driver), name, None), getattr(Driver, name, None)
        if own is not None and base is not None and own is not base:
            return True
    return False


def wakeup_kind(driver: Driver, p50_ms: float, max_fetch_interval: float) -> str:
    hook = cross_process_wakeup(driver)
    fast = p50_ms < max_fetch_interval * 1000 / 4
    if fast and hook:
        return "notification (cross-process wake-up)"
    if fast:
        return "fast without a notify hook (check the setup)"
    return f"polling (max_fetch_interval={max_fetch_interval:g}s)"


async def run_latency(
    target: Target,
    rate_per_s: float,
    seconds: float,
    results: Results,
    *,
    max_fetch_interval: float | None = None,
) -> None:
    """A second broker publishes at a fixed rate; the handler measures the delay.

    With `max_fetch_interval` None the subscriber keeps its default; otherwise the
    metrics are named `p50_ms@mfi=<value>` and so on.
    """
    db = target.database
    suffix = "" if max_fetch_interval is None else f"@mfi={max_fetch_interval:g}"
    intervals: dict[str, Any] = (
        {} if max_fetch_interval is None else {"max_fetch_interval": max_fetch_interval}
    )
    await clear_ours(target.url)
    samples: list[float] = []
    count = int(rate_per_s * seconds)
    consumer = SqlaBroker(target.url, logger=None)
    sub = consumer.subscriber(QUEUE, max_workers=MAX_WORKERS, **intervals)

    @sub
    async def handle(sent: float) -> None:
        samples.append(time.perf_counter() - sent)

    publisher = SqlaBroker(target.url, logger=None)  # its own wake-up hub: no local wake
    await publisher.connect()
    await consumer.start()
    try:
        await asyncio.sleep(0.5)

        achieved, failed = await send_timestamps_and_wait(
            lambda sent: publisher.publish(sent, queue=QUEUE), samples,
            rate_per_s=rate_per_s, count=count, grace=10 + 2 * sub.options.max_fetch_interval,
        )
        driver = consumer.config.driver
    finally:
        await consumer.stop()
        await publisher.stop()
    await clear_ours(target.url)
    if failed:
        results.error("latency", db, "publish", f"{len(failed)} publishes failed: {failed[0]}")
    count -= len(failed)
    if len(samples) < count:
        results.error("latency", db, "delivery", f"{len(samples)} of {count} delivered")
    stats = percentiles(samples)
    kind = wakeup_kind(driver, stats.get("p50_ms", 0), sub.options.max_fetch_interval)
    details = {
        "offered_rate": rate_per_s,
        "achieved_rate": achieved,
        "seconds": seconds,
        "max_fetch_interval": sub.options.max_fetch_interval,
        "wakeup": kind,
        "mean_ms": stats.get("mean_ms"),
        "samples": stats.get("samples"),
        "failed_publishes": len(failed),
    }
    for key in ("p50_ms", "p99_ms", "max_ms"):
        results.add(SYSTEM, "latency", key + suffix, db, stats.get(key), "ms", **details)


# -- scale ------------------------------------------------------------------------------
HEADERS_SQL = """'{"content-type":"application/json"}'"""


def _backlog_sql(
    db: str, n: int, group: int = 1000, table: str = "message", priorities: int = 1
) -> list[str]:
    """Generate n PENDING rows in the database itself, in `table`. Rows come in groups of
    `group` that share a timestamp, as publish_batch(1000) calls leave them (one call is
    one transaction, and the database clock is the transaction's); groups are 1 ms apart,
    oldest first. `group=n` is one publish_batch of everything. Row g has priority
    g % `priorities`."""
    cols = (
        "queue, headers, payload, state, attempts_count, deliveries_count, created_at, "
        "next_attempt_at, priority"
    )
    if db == "postgresql":
        offset = f"((({n - 1} - g) / {group}) * interval '1 millisecond')"
        ts = f"(now() AT TIME ZONE 'UTC') - {offset}"
        return [
            (
                f"INSERT INTO {table} ({cols}) SELECT 'bench', {HEADERS_SQL}::json, "
                f"convert_to(g::text, 'UTF8'), 'PENDING', 0, 0, {ts}, {ts}, g % {priorities} "
                f"FROM generate_series(0, {n - 1}) AS g"
            )
        ]
    if db == "mysql":
        stmts = []
        step = 200_000
        for lo in range(0, n, step):
            hi = min(n, lo + step) - 1
            ts = f"UTC_TIMESTAMP(6) - INTERVAL (({n - 1} - seq) DIV {group}) * 1000 MICROSECOND"
            stmts.append(
                f"INSERT INTO {table} ({cols}) SELECT 'bench', {HEADERS_SQL}, "
                f"CAST(seq AS CHAR), 'PENDING', 0, 0, {ts}, {ts}, MOD(seq, {priorities}) "
                f"FROM seq_{lo}_to_{hi}"
            )
        return stmts
    ts = (
        f"strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || ((({n - 1} - g) / {group}) / 1000.0) "
        "|| ' seconds') || '000'"
    )
    return [
        (
            f"WITH RECURSIVE c(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM c WHERE g < {n - 1}) "
            f"INSERT INTO {table} ({cols}) SELECT 'bench', {HEADERS_SQL}, "
            f"CAST(CAST(g AS TEXT) AS BLOB), 'PENDING', 0, 0, {ts}, {ts}, g % {priorities} "
            "FROM c"
        )
    ]


def _archive_sql(db: str, n: int, table: str = "message_archive") -> list[str]:
    """n COMPLETED rows in the archive `table`, ids far above the message table's."""
    cols = (
        "id, queue, headers, payload, state, attempts_count, deliveries_count, created_at, "
        "first_attempt_at, last_attempt_at, correlation_id, archived_at"
    )
    base = 10**12
    if db == "postgresql":
        ts = "(now() AT TIME ZONE 'UTC') - interval '1 hour'"
        return [
            (
                f"INSERT INTO {table} ({cols}) SELECT {base} + g, 'bench', "
                f"{HEADERS_SQL}::json, convert_to(g::text, 'UTF8'), 'COMPLETED', 1, 1, {ts}, "
                f"{ts}, {ts}, NULL, {ts} FROM generate_series(0, {n - 1}) AS g"
            )
        ]
    if db == "mysql":
        ts = "UTC_TIMESTAMP(6) - INTERVAL 1 HOUR"
        return [
            f"INSERT INTO {table} ({cols}) SELECT {base} + seq, 'bench', {HEADERS_SQL}, "
            f"CAST(seq AS CHAR), 'COMPLETED', 1, 1, {ts}, {ts}, {ts}, NULL, {ts} "
            f"FROM seq_{lo}_to_{min(n, lo + 200_000) - 1}"
            for lo in range(0, n, 200_000)
        ]
    ts = "strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hour') || '000'"
    return [
        (
            f"WITH RECURSIVE c(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM c WHERE g < {n - 1}) "
            f"INSERT INTO {table} ({cols}) SELECT {base} + g, 'bench', {HEADERS_SQL}, "
            f"CAST(CAST(g AS TEXT) AS BLOB), 'COMPLETED', 1, 1, {ts}, {ts}, {ts}, NULL, {ts} "
            "FROM c"
        )
    ]


async def _execute_all(
    url: str,
    statements: list[str],
    analyze: tuple[str, ...] = (),
    tables: TableNames = TableNames(),  # noqa: B008 (frozen)
) -> float:
    """Run the generating statements in one transaction, then let the database settle
    (statistics, checkpoint, dirty pages of `tables`) so the measurement after it does
    not pay for the bulk insert's aftermath. Returns the seconds the insert took."""
    engine = create_async_engine(url)
    try:
        t0 = time.perf_counter()
        async with engine.begin() as conn:
            for stmt in statements:
                await conn.exec_driver_sql(stmt)
        elapsed = time.perf_counter() - t0
        async with engine.connect() as conn:
            name = engine.dialect.name
            if name == "postgresql":
                conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                for table in analyze:  # what autovacuum does within a minute
                    await conn.exec_driver_sql(f"VACUUM ANALYZE {table}")
                await conn.exec_driver_sql("CHECKPOINT")
            elif name == "sqlite":
                await conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            else:
                # writes the tables' dirty pages out (and pauses purge while it does)
                await conn.exec_driver_sql(
                    f"FLUSH TABLES {tables.message}, {tables.archive} FOR EXPORT"
                )
                await conn.exec_driver_sql("UNLOCK TABLES")
    finally:
        await engine.dispose()
    return elapsed


@contextlib.asynccontextmanager
async def our_driver(
    url: str, tables: TableNames = TableNames()  # noqa: B008 (frozen)
) -> AsyncIterator[tuple[AsyncEngine, Driver]]:
    """An engine and our driver for it, prepared as the broker prepares them (which
    also leaves one open connection in the pool)."""
    # no pool_pre_ping: the broker uses none (a retry replaces a lost connection)
    engine: AsyncEngine = create_async_engine(url)
    driver = driver_for(engine, QueueTables(tables))
    driver.configure_engine(engine, owned=True)
    try:
        await driver.prepare(engine)
        yield engine, driver
    finally:
        await engine.dispose()


def acked_outcomes(claimed: list[ClaimedMessage], strategy: RetryStrategy) -> list[Outcome]:
    """The outcomes of `claimed` as if each handler had returned at once."""
    now = time.monotonic()
    outcomes = []
    for msg in claimed:
        msg.decision = AckStatus.ACKED
        at = lifecycle.db_time(msg, now)
        outcomes.append(
            lifecycle.after_attempt(
                msg, started_at=at, finished_at=at, error=None, retry_strategy=strategy
            )
        )
    return outcomes


async def claim_and_ack(engine: AsyncEngine, driver: Driver, n: int, limit: int) -> None:
    """Claim `limit` at a time through our driver, ack them all, write the outcomes,
    until n are done."""
    strategy = default_retry_strategy()
    done = 0
    while done < n:
        claimed = await driver.claim(engine, QUEUE, min(limit, n - done))
        if not claimed:
            break  # reported below
        outcomes = acked_outcomes(claimed, strategy)
        changed = await driver.write_outcomes(engine, outcomes)
        assert changed == len(outcomes), f"{changed} of {len(outcomes)} outcomes written"
        done += len(claimed)
    if done < n:
        problem = f"only {done} of {n} messages could be claimed"
        raise RuntimeError(problem)


async def claim_archive_loop(
    url: str, n: int, limit: int, tables: TableNames = TableNames()  # noqa: B008 (frozen)
) -> float:
    """The rate of `claim_and_ack` over n messages."""
    async with our_driver(url, tables) as (engine, driver):
        t0 = time.perf_counter()
        await claim_and_ack(engine, driver, n, limit)
        return rate(n, time.perf_counter() - t0)


async def rss_drain(url: str, n: int, claims: str, tables: TableNames) -> dict[str, Any]:
    """Drain n messages of a standing backlog in a fresh process; report its peak RSS."""
    return await run_json_subprocess(
        "benchmarks.worker",
        {"task": "rss-drain", "url": url, "n": n, "claims": claims,
         "max_workers": MAX_WORKERS, "message_table": tables.message,
         "archive_table": tables.archive},
        timeout=drain_timeout(n) + 60,
    )


async def run_scale(
    target: Target,
    *,
    small: int,
    big: int,
    claim_n: int,
    archive_rows: int,
    one_timestamp: int,
    rss_n: int,
    limit: int,
    results: Results,
) -> None:
    db = target.database
    url = target.url
    warm = min(10 * limit, claim_n // 2)
    # A drain stops gracefully, handling what its prefetch buffer still holds. The small
    # backlog is refilled before the timed claims now, but the RSS drain keeps the size
    # it had when it shared the backlog with them (the warm-up and timed claims left
    # over), so its figure compares with earlier runs.
    largest_buffer = ConsumeOptions(**claim_options(RSS_CLAIMS)).largest_buffer_capacity
    rss_n = max(1, min(rss_n, small - claim_n - warm - largest_buffer - 50))
    rss: dict[str, dict[str, Any]] = {}
    setup: dict[str, float] = {}
    default_tables = TableNames()

    async def timed(tables: TableNames) -> float:
        await claim_archive_loop(url, warm, limit, tables)
        return await claim_archive_loop(url, claim_n, limit, tables)

    async def fill(tables: TableNames, backlog: int, group: int = 1000) -> float:
        return await _execute_all(
            url, _backlog_sql(db, backlog, group=group, table=tables.message),
            analyze=(tables.message,), tables=tables,
        )

    async def refill(tables: TableNames) -> None:
        # DELETE, not TRUNCATE: ids keep counting and never collide with archived ones
        await clear_tables(url, tables.message, keep_ids=True)  # the archive keeps its rows
        await fill(tables, small)

    # Every backlog stands at once, the others in tables of their own, so their runs
    # alternate with the small backlog's: small, big, small, big archive, small,
    # one timestamp, small, big, ... Each run is compared with the geometric mean of the
    # small runs on either side, so a machine whose speed drifts skews both sides of
    # each comparison alike (as in the drain and processes pairs). The runs use a few
    # thousand messages each: the small backlogs are refilled after each run.
    await clear_ours(url)
    for tables in SCALE_TABLES:
        await downgrade_schema(url, message_table=tables.message, archive_table=tables.archive)
        await upgrade_schema(url, message_table=tables.message, archive_table=tables.archive)
    try:
        for label, backlog, tables in (
            ("small", small, default_tables), ("big", big, BIG_BACKLOG_TABLES)
        ):
            setup[f"backlog_{label}_insert_s"] = await fill(tables, backlog)
            try:  # first, while the backlog is whole
                rss[label] = await rss_drain(url, rss_n, RSS_CLAIMS, tables)
            except Exception as e:  # noqa: BLE001
                results.error("scale", db, f"rss drain ({label} backlog)", e)
        await clear_tables(url, default_tables.message, keep_ids=True)  # the RSS drain's rest
        await fill(default_tables, small)
        await fill(BIG_ARCHIVE_TABLES, small)
        setup["archive_insert_s"] = await _execute_all(
            url, _archive_sql(db, archive_rows, table=BIG_ARCHIVE_TABLES.archive),
            analyze=(BIG_ARCHIVE_TABLES.message, BIG_ARCHIVE_TABLES.archive),
            tables=BIG_ARCHIVE_TABLES,
        )
        # a backlog stored by one publish_batch call: every row shares one next_attempt_at
        setup["one_timestamp_insert_s"] = await fill(
            ONE_TIMESTAMP_TABLES, one_timestamp, group=one_timestamp
        )
        # (label, tables, whether its backlog is refilled after each run)
        others = (
            ("big", BIG_BACKLOG_TABLES, False),
            ("big_archive", BIG_ARCHIVE_TABLES, True),
            ("one_timestamp", ONE_TIMESTAMP_TABLES, False),
        )
        repeats: dict[str, list[float]] = {label: [] for label, _, _ in others}
        repeats["small"] = [await timed(default_tables)]
        pair_ratios: dict[str, list[float]] = {label: [] for label, _, _ in others}
        for _ in range(REPEATS):
            for label, tables, refilled in others:
                repeats[label].append(await timed(tables))
                if refilled:
                    await refill(tables)
                await refill(default_tables)
                repeats["small"].append(await timed(default_tables))
                pair_ratios[label].append(over_neighbours(
                    repeats[label][-1], repeats["small"][-2], repeats["small"][-1]
                ))
    finally:
        for tables in SCALE_TABLES:
            await downgrade_schema(url, message_table=tables.message,
                                   archive_table=tables.archive)
    claim_rates = {label: statistics.median(runs) for label, runs in repeats.items()}
    # Fresh tables for what follows: the statistics gathered here (all rows PENDING)
    # would otherwise steer later plans (TRUNCATE keeps them, ANALYZE of an empty
    # table does not replace them).
    await reset_our_schema(url)

    common = {"claim_n": claim_n, "limit": limit, "median_of": REPEATS,
              "runs_msg_per_s": repeats, **setup}
    ratio_of = ("median over its runs of the rate / geometric mean of the small-backlog "
                "runs just before and after")
    results.add(SYSTEM, "scale", "claim_archive_small_msg_per_s", db, claim_rates["small"],
                "msg/s", backlog=small, **common)
    results.add(SYSTEM, "scale", "claim_archive_big_msg_per_s", db, claim_rates["big"],
                "msg/s", backlog=big, **common)
    results.add(SYSTEM, "scale", "big_over_small", db, statistics.median(pair_ratios["big"]),
                "x", backlog_small=small, backlog_big=big, pair_ratios=pair_ratios["big"],
                ratio_of=ratio_of)
    results.add(SYSTEM, "scale", "claim_archive_big_archive_msg_per_s", db,
                claim_rates["big_archive"], "msg/s", backlog=small, archive_rows=archive_rows,
                **common)
    results.add(SYSTEM, "scale", "big_archive_over_small", db,
                statistics.median(pair_ratios["big_archive"]), "x", archive_rows=archive_rows,
                pair_ratios=pair_ratios["big_archive"], ratio_of=ratio_of)
    results.add(SYSTEM, "scale", "claim_archive_one_timestamp_msg_per_s", db,
                claim_rates["one_timestamp"], "msg/s", backlog=one_timestamp,
                one_timestamp=True, **common)
    results.add(SYSTEM, "scale", "one_timestamp_over_small", db,
                statistics.median(pair_ratios["one_timestamp"]), "x", backlog=one_timestamp,
                pair_ratios=pair_ratios["one_timestamp"], ratio_of=ratio_of)
    for label, backlog in (("small", small), ("big", big)):
        if label in rss:
            r = rss[label]
            results.add(SYSTEM, "scale", f"peak_rss_{label}_backlog_mib", db,
                        r["rss_peak_kib"] / 1024, "MiB", backlog=backlog, drained=rss_n,
                        rss_after_connect_mib=r["rss_connected_kib"] / 1024,
                        rss_max_during_drain_mib=r["rss_max_during_drain_kib"] / 1024,
                        getrusage_ru_maxrss_mib=r["ru_maxrss_kib"] / 1024,
                        peak_source="VmHWM (/proc/self/status)",
                        drain_msg_per_s=r["msg_per_s"], claims=r["claims"],
                        buffer_capacity=r["buffer_capacity"])
