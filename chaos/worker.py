"""A chaos worker: drains the queue "chaos", recording each value it handles as a row
(value, pid) of the table `chaos_handled`, in a transaction of its own, so a message
handled twice (its process killed before its outcome was written) shows up twice.

Usage: python chaos/worker.py DATABASE_URL RELEASE_STUCK_TIMEOUT. Prints READY once
consuming; SIGTERM stops it gracefully; SIGKILL is what the chaos run sends.
"""

import asyncio
import logging
import os
import signal
import sys

import sqlalchemy as sa

from faststream_sqla import SqlaBroker

HANDLED = sa.table("chaos_handled", sa.column("value"), sa.column("pid"))

logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
broker = SqlaBroker(sys.argv[1], logger=logging.getLogger("chaos-worker"))


@broker.subscriber(
    "chaos",
    max_workers=4,
    release_stuck_timeout=float(sys.argv[2]),
    release_stuck_interval=float(sys.argv[2]) / 4,
    min_fetch_interval=0.0,
    max_fetch_interval=0.05,
    flush_interval=0.01,
)
async def handle(value: int) -> None:
    async with broker.engine.begin() as conn:
        await conn.execute(sa.insert(HANDLED).values(value=value, pid=os.getpid()))


async def main() -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await broker.start()
    print("READY", flush=True)
    try:
        await stop.wait()
    finally:
        await broker.stop()


asyncio.run(main())
