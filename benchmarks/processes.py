"""Several processes on one queue: ``faststream run ... --workers 2`` against ``--workers 1``.

The workers start on an empty queue and report ready; then one transaction stores the
backlog (groups of 1000 rows sharing a timestamp, as publish_batch(1000) calls leave
them), one publish wakes the workers (LISTEN/NOTIFY), and the clock runs from it until
the archive holds every message (polled every 20 ms). PostgreSQL only.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla import SqlaBroker

from .common import QUEUE, REPO, Results, Target, clear_ours, count_rows, drain_timeout, rate
from .ours import _backlog_sql, _execute_all

SYSTEM = "faststream-sqla"


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
    target: Target, n: int, workers: int, fetch_batch_size: int, log: Path
) -> dict[str, Any]:
    await clear_ours(target.url)
    ready_dir = Path(tempfile.mkdtemp(prefix="fsqla-bench-ready-"))
    env = {
        **os.environ,
        "DATABASE_URL": target.url,
        "FSQLA_BENCH_QUEUE": QUEUE,
        "FSQLA_BENCH_FETCH_BATCH_SIZE": str(fetch_batch_size),
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
        deadline = time.monotonic() + drain_timeout(n)
        while (done := await count_rows(engine, "message_archive")) < n:
            if time.monotonic() > deadline:
                msg = f"only {done} of {n} archived in time"
                raise TimeoutError(msg)
            await asyncio.sleep(0.02)
        elapsed = time.perf_counter() - t0
    finally:
        await _stop(proc)
        left = await count_rows(engine, "message")
        await engine.dispose()
        shutil.rmtree(ready_dir, ignore_errors=True)
    return {"msg_per_s": rate(n, elapsed), "seconds": elapsed, "left_after_stop": left}


async def run_processes(
    target: Target, n: int, fetch_batch_size: int, results: Results, log: Path
) -> None:
    db = target.database
    runs = {}
    for workers in (1, 2):
        try:
            runs[workers] = await drain_with_workers(target, n, workers, fetch_batch_size, log)
        except Exception as e:  # noqa: BLE001
            results.error("processes", db, f"--workers {workers}", e)
    await clear_ours(target.url)
    common = {"n": n, "fetch_batch_size": fetch_batch_size, "max_workers": 8,
              "event_loop": event_loop_used()}
    for workers, run in runs.items():
        results.add(SYSTEM, "processes", f"workers_{workers}_msg_per_s", db, run["msg_per_s"],
                    "msg/s", **common)
    if len(runs) == 2:
        results.add(SYSTEM, "processes", "workers_2_over_1", db,
                    runs[2]["msg_per_s"] / runs[1]["msg_per_s"], "x", **common)
