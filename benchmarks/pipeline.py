"""FastStream's own consume path with no database: the per-message ceiling of one process.

A `SqlaBroker` with a no-op subscriber is never started (no engine, no loops); its
subscriber's handler model is built the way FastStream builds it at start, then
``process_message`` runs for pre-built `ClaimedMessage` objects: middlewares, parsing,
decoding, FastDepends validation of ``body: int``, the handler, the acknowledgement.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

from faststream._internal.endpoint.subscriber import SubscriberUsecase

from faststream_sqla import SqlaBroker
from faststream_sqla.message import ClaimedMessage

from .common import QUEUE, Results, rate, silenced_access_log


def claimed(i: int) -> ClaimedMessage:
    now = datetime.now(timezone.utc).replace(tzinfo=None)  # as claimed: naive UTC
    return ClaimedMessage(
        id=i,
        queue=QUEUE,
        headers={"content-type": "application/json"},
        payload=str(i).encode(),
        attempts_count=0,
        deliveries_count=1,
        created_at=now,
        next_attempt_at=now,
        acquired_at=now,
        claimed_at_monotonic=time.monotonic(),
    )


async def measure(n: int, *, access_log: bool, tmpdir: Path) -> float:
    """Messages per second through `process_message`."""
    url = f"sqlite+aiosqlite:///{tmpdir / 'never-connected.db'}"
    broker = SqlaBroker(url) if access_log else SqlaBroker(url, logger=None)
    handled = 0

    @broker.subscriber(QUEUE)
    async def handle(body: int) -> None:
        nonlocal handled
        handled += 1

    broker._setup_logger()  # what connect() does
    with silenced_access_log() if access_log else contextlib.nullcontext():
        # FastStream's part of start(): build the handler model. Not SqlaSubscriber.start,
        # which would start the database loops.
        await SubscriberUsecase.start(broker.subscribers[0])
        sub = broker.subscribers[0]
        for i in range(min(500, n)):  # warm-up
            await sub.process_message(claimed(i))
        messages = [claimed(i) for i in range(n)]
        handled = 0
        t0 = time.perf_counter()
        for m in messages:
            await sub.process_message(m)
        elapsed = time.perf_counter() - t0
    assert handled == n, f"handler ran {handled} times for {n} messages"
    assert all(m.decision is not None for m in messages), "no acknowledgement recorded"
    return rate(n, elapsed)


async def run_pipeline(n: int, results: Results, tmpdir: Path, repeats: int = 1) -> None:
    """Median of `repeats` measurements per logging setting."""
    off_runs = [await measure(n, access_log=False, tmpdir=tmpdir) for _ in range(repeats)]
    on_runs = [await measure(n, access_log=True, tmpdir=tmpdir) for _ in range(repeats)]
    off, on = statistics.median(off_runs), statistics.median(on_runs)
    results.add("pipeline", "pipeline", "log_off_msg_per_s", "-", off, "msg/s", n=n,
                us_per_msg=1e6 / off, repeat_runs=off_runs)
    results.add("pipeline", "pipeline", "log_on_msg_per_s", "-", on, "msg/s", n=n,
                us_per_msg=1e6 / on, log_stream=os.devnull, repeat_runs=on_runs)
