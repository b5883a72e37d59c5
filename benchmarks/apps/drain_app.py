"""A no-op consumer for the processes benchmark: ``faststream run benchmarks.apps.drain_app:app``.

Environment: ``DATABASE_URL`` (required), ``FSQLA_BENCH_QUEUE`` (default ``bench``),
``FSQLA_BENCH_CLAIMS`` (claim sizes as in ``benchmarks.common.claim_options``, such as
``1000`` or ``100-1000``; default: the broker's), ``FSQLA_BENCH_MAX_WORKERS`` (default 8),
``FSQLA_BENCH_READY_DIR`` (each process writes a file named after its pid there once
started, so the benchmark knows when to start the clock).
"""

from __future__ import annotations

import os
from pathlib import Path

from faststream import FastStream

from benchmarks.common import claim_options
from faststream_sqla import SqlaBroker

broker = SqlaBroker(os.environ["DATABASE_URL"], logger=None)
claims = os.environ.get("FSQLA_BENCH_CLAIMS")
app = FastStream(broker, logger=None)


@broker.subscriber(
    os.environ.get("FSQLA_BENCH_QUEUE", "bench"),
    max_workers=int(os.environ.get("FSQLA_BENCH_MAX_WORKERS", "8")),
    **(claim_options(claims) if claims else {}),
)
async def handle(body: int) -> None:
    pass


@app.after_startup
async def ready() -> None:
    if ready_dir := os.environ.get("FSQLA_BENCH_READY_DIR"):
        (Path(ready_dir) / str(os.getpid())).touch()
