"""A worker that consumes "jobs" and says which row of the workers table is its own.

Usage: registered.py DATABASE_URL. Starts its broker, prints `WORKER <worker_id>` once
its row is written, then runs until SIGTERM, when it stops gracefully. Its leases, and
so its row, are renewed every second: the test sees it gone three seconds after a
SIGKILL.
"""

import asyncio
import logging
import signal
import sys

from faststream_sqla import SqlaBroker

logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
broker = SqlaBroker(sys.argv[1], logger=logging.getLogger("worker"))


# "gone" three seconds after it falls silent: soon enough for a test to watch, longer
# than a loaded host's pauses
@broker.subscriber("jobs", release_stuck_timeout=3.0, max_fetch_interval=0.05)
async def handle(body: str) -> None:
    pass


async def main() -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await broker.start()
    print(f"WORKER {broker.config.workers.identity.worker_id}", flush=True)
    try:
        await stop.wait()
    finally:
        await broker.stop()


asyncio.run(main())
