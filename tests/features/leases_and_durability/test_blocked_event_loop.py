"""A handler that blocks the event loop: its process never releases its own claims,
and the log names the handler that blocked it."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from pathlib import Path

from faststream_sqla import MessageState, SqlaBroker, SqlaMessage
from faststream_sqla.stall import LoopStallWatch

from tests.support.helpers import FAST, Recorder, rows

TIMEOUT = 1.0
#: longer than the lease: once the loop turns again, every claim this process holds is
#: older than release_stuck_timeout, and release-stuck is due at the same moment
BLOCK = 1.5


async def test_release_stuck_never_takes_its_own_process_claims(
    database_url, engine, tables, caplog
):
    caplog.set_level(logging.WARNING)
    # a logger that propagates to caplog (FastStream's own does not)
    broker = SqlaBroker(database_url, logger=logging.getLogger("test.stalled_loop"))
    handled = Recorder()

    @broker.subscriber(
        "q", max_workers=3, release_stuck_timeout=TIMEOUT, release_stuck_interval=0.05, **FAST
    )
    async def blocks_the_loop(n: int, msg: SqlaMessage) -> None:
        handled.record((n, msg.deliveries_count))
        time.sleep(BLOCK)  # noqa: ASYNC251 - the mistake under test

    async with broker:
        await broker.publish_batch(1, 2, queue="q")
        await broker.start()
        await handled.wait_for(2)
        # a third message after the stalls: its delivery proves the stalls' outcomes,
        # written before it in the same flusher, are in
        await broker.publish(3, queue="q")
        await handled.wait_for(3)

    assert sorted(handled.calls) == [(1, 1), (2, 1), (3, 1)]
    done = await rows(engine, tables.archive)
    left = [dict(r) for r in await rows(engine, tables.message)]
    logged = [r.getMessage() for r in caplog.records]
    assert [(r["state"], r["deliveries_count"]) for r in done] == [
        (MessageState.COMPLETED, 1)
    ] * 3, (left, logged)
    assert not [r for r in caplog.records if "stale" in r.getMessage()]
    assert not [r for r in caplog.records if "stuck in PROCESSING" in r.getMessage()]
    stalls = [r.getMessage() for r in caplog.records if "event loop was blocked" in r.getMessage()]
    # (a busy host can stall the loop briefly on its own too: those lines name no handler)
    named = [line for line in stalls if "blocks_the_loop" in line]
    assert named, f"the stall was not reported: {stalls}"
    assert all("queue 'q'" in line and Path(__file__).name in line for line in named)


class _SlowToCollect:
    """One half of a reference cycle whose finalizer takes long: a collection that
    pauses the loop while no handler code runs."""

    def __init__(self) -> None:
        self.other: _SlowToCollect | None = None

    def __del__(self) -> None:
        time.sleep(0.4)


async def test_a_pause_spent_collecting_garbage_blames_no_task():
    loop = asyncio.get_running_loop()
    lines: list[tuple[int, str]] = []
    reported = asyncio.Event()

    def log(level: int, line: str) -> None:  # called on the watch's own thread
        lines.append((level, line))
        loop.call_soon_threadsafe(reported.set)

    watch = LoopStallWatch(log, threshold=0.2)

    async def allocates() -> None:
        first, second = _SlowToCollect(), _SlowToCollect()
        first.other, second.other = second, first
        del first, second
        gc.collect()  # both finalizers run inside this collection, on the loop's thread

    task = asyncio.create_task(allocates())
    watch.watch(task, lambda: "the allocating task", threshold=0.2)
    await task
    await reported.wait()  # the watch reports once the loop turns again
    watch.stop()

    assert [level for level, _ in lines] == [logging.INFO], lines
    assert "garbage collector" in lines[0][1]
    assert "the allocating task" not in lines[0][1]
