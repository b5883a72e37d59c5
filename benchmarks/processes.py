"""Several processes on one queue: ``faststream run ... --workers 2`` against ``--workers 1``.

The workers start on an empty queue and report ready; then one transaction stores the
backlog (groups of 1000 rows sharing a timestamp, as publish_batch(1000) calls leave
them), one publish wakes the workers (LISTEN/NOTIFY), and the clock runs from it until
the message table is empty (polled every 50 ms; runs take seconds), then the archive
is counted once. The poll is one index probe on one connection held open. The
count(*) of the growing archive every 20 ms it replaces cost the server ~2.5 ms of CPU
a poll at 40,000 rows, and a pooled connection a poll cost this process ~8% of a core:
both came out of the two cores the workers share. One- and two-process runs alternate,
1, 2, 1, 2, ..., 1 (five two-process runs), and each two-process rate is compared with
the geometric mean of the one-process runs on either side; the ratio is the median of
those, so a machine whose speed drifts during the run skews both sides of each
comparison alike, and one pair caught by a slow spell does not move the median. Each run
also reads, from /proc, the CPU the `faststream run` processes and the database server
used while the queue drained; from the one-process runs' medians, W and S a message,
the scenario reports 2W / (W + S), the most two processes can give over one when the
two of them and the server share two cores.
PostgreSQL only.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from faststream_sqla import SqlaBroker

from .common import (
    QUEUE,
    REPO,
    Results,
    Target,
    clear_ours,
    count_rows,
    cpu_seconds,
    drain_timeout,
    over_neighbours,
    process_stats,
    processes_metric,
    rate,
    server_cpu_seconds,
)
from .ours import _backlog_sql, _execute_all

SYSTEM = "faststream-sqla"
# two-process runs, each between one-process runs; the ratio is their median. Five, not
# three: on a shared host one pair in three read 1.15 where its neighbours read 1.4-1.5.
PAIRS = 5


async def queue_is_empty(conn: AsyncConnection) -> bool:
    """One primary-key probe: no row left means every message was archived."""
    result = await conn.exec_driver_sql("SELECT id FROM message ORDER BY id LIMIT 1")
    return result.first() is None


def group_cpu_seconds(pgid: int) -> float | None:
    """CPU time (user + system) of the live processes in process group `pgid`: the
    `faststream run` supervisor and its workers, read from /proc before they stop;
    None where there is no /proc."""
    if not Path("/proc").is_dir():
        return None
    return cpu_seconds(sum(
        int(fields[11]) + int(fields[12]) for _, fields in process_stats()
        if int(fields[2]) == pgid
    ))


def cpu_cap(worker_us: float, server_us: float) -> float | None:
    """The most two processes can give over one when one process is bound by its own
    CPU (`worker_us` a message) and the two processes and the server share two cores:
    one process runs at 1/W, two at most at 2/(W + S)."""
    if worker_us + server_us <= 0:  # /proc's 10 ms ticks read nothing (a tiny --quick run)
        return None
    return 2 * worker_us / (worker_us + server_us)


def event_loop_used() -> str:
    # `faststream run` picks uvloop when it is installed (pgqueuer depends on it).
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # the group we created: supervisor + workers
    except ProcessLookupError:
        return
    try:
        await asyncio.wait_for(proc.wait(), 30)
    except asyncio.TimeoutError:
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


async def drain_with_workers(
    target: Target, n: int, workers: int, claims: str, log: Path
) -> dict[str, Any]:
    await clear_ours(target.url)
    ready_dir = Path(tempfile.mkdtemp(prefix="fsqla-bench-ready-"))
    env = {
        **os.environ,
        "DATABASE_URL": target.url,
        "FSQLA_BENCH_QUEUE": QUEUE,
        "FSQLA_BENCH_CLAIMS": claims,
        "FSQLA_BENCH_READY_DIR": str(ready_dir),
    }
    faststream = Path(sys.executable).with_name("faststream")
    with log.open("ab") as out:
        proc = await asyncio.create_subprocess_exec(
            str(faststream), "run", "benchmarks.apps.drain_app:app", "--workers", str(workers),
            cwd=str(REPO), env=env, stdout=out, stderr=out, start_new_session=True,
        )
    engine = create_async_engine(target.url)
    try:
        deadline = time.monotonic() + 60
        while len(list(ready_dir.iterdir())) < workers:
            if proc.returncode is not None or time.monotonic() > deadline:
                msg = f"workers did not start (see {log})"
                raise RuntimeError(msg)
            await asyncio.sleep(0.05)
        # The backlog as publish_batch(1000) calls leave it (groups of 1000 sharing a
        # timestamp), written in one transaction the workers do not hear about; then one
        # publish whose notification wakes them, and the clock starts.
        await _execute_all(target.url, _backlog_sql(target.database, n - 1))
        async with SqlaBroker(target.url, logger=None) as publisher:
            await publisher.publish(n - 1, queue=QUEUE)
        t0 = time.perf_counter()
        cpu0 = group_cpu_seconds(proc.pid), server_cpu_seconds(target.database)
        deadline = time.monotonic() + drain_timeout(n)
        # autocommit: each poll sees the latest commits, and no open transaction
        # holds back vacuum while the workers run
        async with engine.connect() as conn:
            poll = await conn.execution_options(isolation_level="AUTOCOMMIT")
            while not await queue_is_empty(poll):
                if time.monotonic() > deadline:
                    done = await count_rows(engine, "message_archive")
                    msg = f"only {done} of {n} archived in time"
                    raise TimeoutError(msg)
                await asyncio.sleep(0.05)
            elapsed = time.perf_counter() - t0
            cpu1 = group_cpu_seconds(proc.pid), server_cpu_seconds(target.database)
        if (done := await count_rows(engine, "message_archive")) != n:
            msg = f"the queue emptied with {done} of {n} messages archived"
            raise RuntimeError(msg)
    finally:
        await _stop(proc)
        left = await count_rows(engine, "message")
        await engine.dispose()
        shutil.rmtree(ready_dir, ignore_errors=True)
    worker_us, server_us = (
        None if before is None or after is None else 1e6 * (after - before) / n
        for before, after in zip(cpu0, cpu1, strict=True)
    )
    return {
        "msg_per_s": rate(n, elapsed),
        "seconds": elapsed,
        "left_after_stop": left,
        "worker_cpu_us_per_msg": worker_us,
        "server_cpu_us_per_msg": server_us,
    }


async def run_processes(
    target: Target, n: int, claims: str, results: Results, log: Path
) -> None:
    db = target.database
    runs: dict[int, list[float]] = {1: [], 2: []}
    # CPU a message per run, by process count: the one-process runs give the cap; the
    # two-process runs show whether a message costs more when two processes share a queue
    cpu: dict[int, dict[str, list[float]]] = {
        w: {"worker": [], "server": []} for w in (1, 2)
    }
    # the share of the machine's cores the workers and the server used in the
    # two-process runs: the rest went to other processes (the kernel's writeback of
    # the server's writes, this script) or stood idle, and the ratio reaches its cap
    # only at a share of 1
    shares: list[float] = []
    cores = os.cpu_count() or 1
    pair_ratios = []

    async def drain(workers: int) -> float | None:
        try:
            run = await drain_with_workers(target, n, workers, claims, log)
        except Exception as e:  # noqa: BLE001
            results.error("processes", db, f"--workers {workers}", e)
            return None
        runs[workers].append(run["msg_per_s"])
        worker_us, server_us = run["worker_cpu_us_per_msg"], run["server_cpu_us_per_msg"]
        if worker_us is not None and server_us is not None:
            cpu[workers]["worker"].append(worker_us)
            cpu[workers]["server"].append(server_us)
            if workers == 2:
                used = (worker_us + server_us) * n / 1e6
                shares.append(100 * used / (run["seconds"] * cores))
        return run["msg_per_s"]

    # 1, 2, 1, 2, ..., 1: each two-process run is bracketed by one-process runs, and
    # compared with their geometric mean, so a drift through the pair cancels.
    before = await drain(1)
    for _ in range(PAIRS):
        two = await drain(2)
        after = await drain(1)
        if before and two and after:
            pair_ratios.append(over_neighbours(two, before, after))
        before = after
    await clear_ours(target.url)
    common = {"n": n, "claims": claims, "max_workers": 8,
              "event_loop": event_loop_used()}

    def add_median(name: str, samples: list[float], unit: str, **details: Any) -> None:
        results.add(SYSTEM, "processes", processes_metric(name, claims), db,
                    statistics.median(samples), unit, runs=samples, **details, **common)

    for workers, rates in runs.items():
        if rates:
            add_median(f"workers_{workers}_msg_per_s", rates, "msg/s")
    if pair_ratios:
        results.add(SYSTEM, "processes", processes_metric("workers_2_over_1", claims), db,
                    statistics.median(pair_ratios), "x", pair_ratios=pair_ratios,
                    ratio_of="median over two-process runs of the rate / geometric mean of "
                    "the one-process runs just before and after", **common)
    for part, samples in cpu[2].items():
        if samples:
            add_median(f"workers_2_{part}_cpu_us_per_msg", samples, "µs/msg")
    if shares:
        add_median("workers_2_cpu_share", shares, "%", cores=cores,
                   share_of="(worker + server CPU) / (elapsed x cores), two-process runs")
    one = cpu[1]
    if one["worker"]:
        # What bounds the ratio on this machine: CPU a message in the one-process runs.
        for part, samples in one.items():
            add_median(f"{part}_cpu_us_per_msg", samples, "µs/msg")
        cap = cpu_cap(statistics.median(one["worker"]), statistics.median(one["server"]))
        results.add(SYSTEM, "processes", processes_metric("cpu_cap_2_over_1", claims),
                    db, cap, "x",
                    ratio_of="2W / (W + S), W and S the worker's and the server's CPU a "
                    "message in the one-process runs", **common)
