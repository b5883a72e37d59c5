"""Databases, settings, results and small helpers shared by every scenario.

Benchmarks use databases of their own (``fsqla_bench`` for us and the raw baseline,
``fsqla_bench_peer`` for peer libraries, whose tables are also called ``message``), so
nothing collides with the test suite. FSQLA_DB_PREFIX replaces their ``fsqla`` prefix, as
it does the test suite's, so runs from several checkouts on one server do not drop each
other's tables. SQLite files live in a temporary directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import math
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from faststream_sqla.schema import QueueTables

PG_SERVER = os.environ.get("FSQLA_PG_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432")
MYSQL_SERVER = os.environ.get("FSQLA_MYSQL_URL", "mysql+asyncmy://root@127.0.0.1:3306")
_PREFIX = os.environ.get("FSQLA_DB_PREFIX", "fsqla")
BENCH_DB = f"{_PREFIX}_bench"
PEER_DB = f"{_PREFIX}_bench_peer"
DATABASES = ("sqlite", "postgresql", "mysql")
LABELS = {"sqlite": "SQLite", "postgresql": "PostgreSQL", "mysql": "MariaDB"}
QUEUE = "bench"
JSON_HEADERS = '{"content-type":"application/json"}'
REPO = Path(__file__).resolve().parents[1]

#: a peer's drain run as one half of a pair with ours (benchmarks/pairs.py)
PAIRED_DRAIN_METRIC = "paired_drain_msg_per_s"

#: the claim sizes the broker's default adapts between (subscriber/claim_size.py)
DEFAULT_CLAIMS = "100-1000"

#: claims of the processes scenario: the default, and the largest fixed size drains try
PROCESSES_CLAIMS = (DEFAULT_CLAIMS, "1000")


def claim_options(claims: str) -> dict[str, int]:
    """Subscriber options for a claim spec: "500" is a fixed claim of 500, "100-1000" one
    that adapts between 100 and 1000 with the handlers' speed."""
    low, _, high = claims.partition("-")
    return {"fetch_batch_size": int(low), "max_fetch_batch_size": int(high or low)}


def processes_metric(name: str, claims: str) -> str:
    """A processes figure's name: plain at the default claims, else with a suffix."""
    if claims == PROCESSES_CLAIMS[0]:
        return name
    return f"{name}@claims={claims}"


@dataclass(frozen=True)
class Target:
    """One database as the benchmarks see it: our URL and the peers' URL."""

    database: str  # sqlite | postgresql | mysql
    url: str
    peer_url: str

    @property
    def label(self) -> str:
        return LABELS[self.database]


def make_targets(databases: list[str], tmpdir: Path) -> dict[str, Target]:
    targets = {}
    for db in databases:
        if db == "sqlite":
            targets[db] = Target(
                db,
                f"sqlite+aiosqlite:///{tmpdir / 'bench.db'}",
                f"sqlite+aiosqlite:///{tmpdir / 'bench_peer.db'}",
            )
        elif db == "postgresql":
            targets[db] = Target(db, f"{PG_SERVER}/{BENCH_DB}", f"{PG_SERVER}/{PEER_DB}")
        elif db == "mysql":
            targets[db] = Target(db, f"{MYSQL_SERVER}/{BENCH_DB}", f"{MYSQL_SERVER}/{PEER_DB}")
        else:
            msg = f"unknown database {db!r}; choose from {', '.join(DATABASES)}"
            raise SystemExit(msg)
    return targets


def driver_params(url: str) -> dict[str, Any]:
    """Host, port, user, password and database of a SQLAlchemy URL, for raw drivers."""
    u = make_url(url)
    return {
        "host": u.host or "127.0.0.1",
        "port": u.port,
        "user": u.username,
        "password": u.password or "",
        "database": u.database,
    }


def sqlite_path(url: str) -> str:
    return str(make_url(url).database)


async def ensure_server_databases(database: str) -> None:
    """Create fsqla_bench and fsqla_bench_peer if missing."""
    for name in (BENCH_DB, PEER_DB):
        await create_database(database, name)


#: every table of our schema (MySQL's shape, which adds message_keys), dependants first,
#: then the version table: read from the schema, so a new table is never left behind
OUR_TABLES = (
    *(t.name for t in reversed(QueueTables(dialect="mysql").metadata.sorted_tables)),
    "faststream_sqla_version",
)


async def reset_our_schema(url: str) -> None:
    """A fresh schema for this run: our migrations may have changed since the last one."""
    from faststream_sqla import upgrade_schema

    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            for table in OUR_TABLES:
                q = engine.dialect.identifier_preparer.quote(table)
                await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {q}")
        await upgrade_schema(engine)
    finally:
        await engine.dispose()


async def fresh_target(database: str, url: str) -> None:
    """The benchmark databases exist (servers) and `url` holds our current schema, empty."""
    await ensure_server_databases(database)
    await reset_our_schema(url)


async def clear_tables(url: str, *tables: str, keep_ids: bool = False) -> None:
    """Empty tables between scenarios (TRUNCATE where the database has it).

    `keep_ids`: DELETE instead, so auto-increment keeps counting (TRUNCATE restarts it
    on MariaDB, and new ids would collide with archived ones)."""
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            for table in tables:
                q = engine.dialect.identifier_preparer.quote(table)
                if keep_ids or engine.dialect.name == "sqlite":
                    await conn.exec_driver_sql(f"DELETE FROM {q}")
                else:
                    await conn.exec_driver_sql(f"TRUNCATE TABLE {q}")
    finally:
        await engine.dispose()


SERVER_PROCESS_NAMES = {"postgresql": "postgres", "mysql": "mariadbd"}


def process_stats() -> Iterator[tuple[str, list[str]]]:
    """(name, the fields after the name) of every live process, from /proc/<pid>/stat;
    nothing where there is no /proc. Of the fields, [2] is the process group and
    [11:15] are utime, stime, cutime and cstime in clock ticks."""
    if not Path("/proc").is_dir():
        return
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
        except OSError:  # the process ended
            continue
        head, rest = text.rsplit(")", 1)  # the name may itself hold ")" or spaces
        yield head.split("(", 1)[1], rest.split()


def cpu_seconds(ticks: int) -> float:
    return ticks / os.sysconf("SC_CLK_TCK")


def server_cpu_seconds(database: str) -> float | None:
    """CPU time used so far by the local database server's processes (user + system,
    exited children included: PostgreSQL's backends end when their connections close),
    or None when the server is not on this machine or /proc cannot tell."""
    name = SERVER_PROCESS_NAMES.get(database)
    if name is None:
        return None
    server = [fields for comm, fields in process_stats() if comm.startswith(name)]
    if not server:
        return None
    return cpu_seconds(sum(int(x) for fields in server for x in fields[11:15]))


async def clear_ours(url: str) -> None:
    mysql = url.startswith("mysql")
    await clear_tables(url, *(["message_keys"] if mysql else []), "message", "message_archive")


async def count_rows(engine: AsyncEngine, table: str, where: str = "") -> int:
    q = engine.dialect.identifier_preparer.quote(table)
    async with engine.connect() as conn:
        return int(await conn.scalar(sa.text(f"SELECT count(*) FROM {q} {where}")))


_SQLITE_SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


async def durability_settings(target: Target) -> dict[str, Any]:
    """The server settings that decide what a commit costs."""
    if target.database == "postgresql":
        engine = create_async_engine(target.url)
        async with engine.connect() as conn:
            out = {
                name: await conn.scalar(sa.text(f"SHOW {name}"))
                for name in ("fsync", "synchronous_commit", "wal_level", "full_page_writes")
            }
            out["version"] = await conn.scalar(sa.text("SHOW server_version"))
        await engine.dispose()
        return out
    if target.database == "mysql":
        engine = create_async_engine(target.url)
        async with engine.connect() as conn:
            row = (
                await conn.execute(
                    sa.text(
                        "SELECT @@innodb_flush_log_at_trx_commit, @@sync_binlog, @@version, "
                        "@@log_bin"
                    )
                )
            ).one()
        await engine.dispose()
        return {
            "innodb_flush_log_at_trx_commit": row[0],
            "sync_binlog": row[1],
            "version": row[2],
            "log_bin": row[3],
        }
    # SQLite: as our broker's engine sets them (WAL, default synchronous).
    from faststream_sqla import SqlaBroker

    broker = SqlaBroker(target.url, logger=None)
    await broker.connect()
    try:
        async with broker.engine.connect() as conn:
            journal = await conn.scalar(sa.text("PRAGMA journal_mode"))
            sync = await conn.scalar(sa.text("PRAGMA synchronous"))
    finally:
        await broker.stop()
    import sqlite3

    return {
        "journal_mode": journal,
        "synchronous": _SQLITE_SYNCHRONOUS.get(int(sync), sync),
        "version": sqlite3.sqlite_version,
    }


# -- results ----------------------------------------------------------------------------
@dataclass
class Results:
    """Every figure of a run, flat, plus errors; ratios are added by the report."""

    figures: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)

    def add(
        self,
        system: str,
        scenario: str,
        metric: str,
        database: str,
        value: float | None,
        unit: str,
        **details: Any,
    ) -> dict[str, Any]:
        fig: dict[str, Any] = {
            "system": system,
            "scenario": scenario,
            "metric": metric,
            "database": database,
            "value": value,
            "unit": unit,
        }
        if details:
            fig["details"] = details
        self.figures.append(fig)
        return fig

    def error(self, scenario: str, database: str, what: str, exc: BaseException | str) -> None:
        text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        text = text if len(text) <= 600 else text[:600] + " ..."
        self.errors.append(
            {"scenario": scenario, "database": database, "what": what, "error": text}
        )
        print(f"  ! {scenario}/{database}/{what}: {text}", file=sys.stderr, flush=True)

    def find(
        self, system: str, scenario: str, metric: str, database: str
    ) -> dict[str, Any] | None:
        """The figure itself, details and all."""
        key = (system, scenario, metric, database)
        for f in self.figures:
            if (f["system"], f["scenario"], f["metric"], f["database"]) == key:
                return f
        return None

    def get(self, system: str, scenario: str, metric: str, database: str) -> float | None:
        f = self.find(system, scenario, metric, database)
        return None if f is None else f["value"]  # type: ignore[no-any-return]


def over_neighbours(value: float, before: float, after: float) -> float:
    """`value` over the geometric mean of the baseline measured just before it and the
    one just after: on a machine whose speed drifts, a drift that runs through the three
    moves both sides alike, where a baseline measured once, minutes away, would not."""
    return value / math.sqrt(before * after)


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50/p99/max in milliseconds of samples given in seconds."""
    if not samples:
        return {}
    ordered = sorted(samples)

    def pct(p: float) -> float:
        k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
        return ordered[k] * 1000

    return {
        "p50_ms": pct(50),
        "p99_ms": pct(99),
        "max_ms": ordered[-1] * 1000,
        "mean_ms": statistics.fmean(ordered) * 1000,
        "samples": len(ordered),
    }


async def paced(rate_per_s: float, count: int, send: Callable[[int], Awaitable[None]]) -> float:
    """Call `send(i)` `count` times at `rate_per_s` (open loop: a late send does not
    delay the schedule of the next ones). Returns the achieved rate."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i in range(count):
        target = start + i / rate_per_s
        delay = target - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        await send(i)
    return count / max(loop.time() - start, 1e-9)


async def send_timestamps_and_wait(
    publish: Callable[[float], Awaitable[Any]],
    samples: list[float],
    *,
    rate_per_s: float,
    count: int,
    grace: float,
) -> tuple[float, list[str]]:
    """The latency scenarios' publishing side: `publish(time.perf_counter())` `count`
    times at `rate_per_s`, then wait up to `grace` seconds until the handler has appended
    a sample for every message that was stored. A failed publish is recorded, not fatal.
    Returns the achieved rate and the failures."""
    failed: list[str] = []

    async def send(_: int) -> None:
        try:
            await publish(time.perf_counter())
        except Exception as e:
            failed.append(repr(e))

    achieved = await paced(rate_per_s, count, send)
    deadline = time.monotonic() + grace
    while len(samples) < count - len(failed) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return achieved, failed


class CountDown:
    """A handler-side counter with an event set when it reaches its target."""

    def __init__(self, target: int) -> None:
        self.target, self.count = target, 0
        self.done = asyncio.Event()

    def hit(self, k: int = 1) -> None:
        self.count += k
        if self.count >= self.target:
            self.done.set()

    async def wait(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self.done.wait(), timeout)
        except asyncio.TimeoutError:
            msg = f"only {self.count} of {self.target} messages handled within {timeout:.0f}s"
            raise TimeoutError(msg) from None


def drain_timeout(n: int, floor_rate: float = 150.0) -> float:
    """Generous: a drain slower than `floor_rate` msg/s is a failure, not a figure."""
    return 60.0 + n / floor_rate


@dataclass
class CollectorActivity:
    """What Python's garbage collector did while it was watched: collections by
    generation (0, 1, 2) and the seconds they took."""

    collections: list[int] = field(default_factory=lambda: [0, 0, 0])
    seconds: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])

    @property
    def full_collections(self) -> int:
        return self.collections[2]


@contextlib.contextmanager
def watched_collector(activity: CollectorActivity | None = None) -> Iterator[CollectorActivity]:
    """Record the collector's work inside the block into `activity` (a new one if None).
    A full collection walks every object the process holds, so whether one falls inside
    a timed drain moves its rate visibly; reports show the count beside the rate."""
    watched = CollectorActivity() if activity is None else activity
    began = [0.0]

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            watched.collections[info["generation"]] += 1
            watched.seconds[info["generation"]] += time.perf_counter() - began[0]

    gc.callbacks.append(watch)
    try:
        yield watched
    finally:
        gc.callbacks.remove(watch)


async def timed_drain(
    broker: Any, countdown: CountDown, n: int, collector: CollectorActivity | None = None
) -> float:
    """Seconds from `start()` until all `n` messages are handled and `stop()` (with its
    final flush) has returned; `collector` gets the garbage collector's work meanwhile."""
    with watched_collector(collector):
        t0 = time.perf_counter()
        try:
            await broker.start()
            await countdown.wait(drain_timeout(n))
        finally:
            await broker.stop()
        return time.perf_counter() - t0


async def run_json_subprocess(
    module: str, args: dict[str, Any], *, timeout: float, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run `python -m module '<json args>'`; its last stdout line is the JSON result."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        json.dumps(args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=str(REPO),
        env={**os.environ, **(env or {})},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        msg = f"{module} did not finish within {timeout:.0f}s"
        raise TimeoutError(msg) from None
    lines = [line for line in out.decode().splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        tail = err.decode()[-3000:]
        msg = f"{module} exited with {proc.returncode}: {tail}"
        raise RuntimeError(msg)
    return dict(json.loads(lines[-1]))


@contextlib.contextmanager
def silenced_access_log() -> Iterator[None]:
    """Point the default access logger at os.devnull while the block runs: it still
    formats and writes every record, as in production, but the table on stdout stays
    readable. The handlers get their streams back afterwards."""
    handlers = [
        h for h in logging.getLogger("faststream.access.sqla").handlers
        if isinstance(h, logging.StreamHandler)
    ]
    with open(os.devnull, "w") as devnull:
        previous = [h.setStream(devnull) for h in handlers]
        try:
            yield
        finally:
            for handler, stream in zip(handlers, previous, strict=True):
                handler.setStream(stream)


async def create_database(database: str, name: str) -> None:
    """Create the database `name` on the PostgreSQL or MariaDB server (`database`:
    "postgresql" or "mysql") if it is missing; SQLite needs nothing."""
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import create_async_engine

    if database == "postgresql":
        admin = create_async_engine(f"{PG_SERVER}/postgres", isolation_level="AUTOCOMMIT")
        async with admin.connect() as conn:
            exists = await conn.scalar(
                sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}
            )
            if not exists:
                await conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        await admin.dispose()
    elif database == "mysql":
        admin = create_async_engine(f"{MYSQL_SERVER}/")
        async with admin.connect() as conn:
            await conn.exec_driver_sql(f"CREATE DATABASE IF NOT EXISTS `{name}`")
        await admin.dispose()
