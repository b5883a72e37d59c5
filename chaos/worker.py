"""A chaos worker: drains the queue "chaos", recording each value it handles as a row
(value, pid) of the table `chaos_handled`, in a transaction of its own, so a message
handled twice (its process killed before its outcome was written) shows up twice.

Usage: python chaos/worker.py DATABASE_URL RELEASE_STUCK_TIMEOUT [RECORD_FILE]. Prints
READY once consuming; SIGTERM stops it gracefully; SIGKILL is what the chaos run sends.

With RECORD_FILE (chaos/failover.py), each handled value is appended to that file
instead, as a line "value pid deliveries_count token handled_at claimed_at" (unix
times): the database itself may lose recent writes in a failover, the file does not.
The handler then takes HANDLER_SECONDS (default 0) too, so a drain lasts long enough
to be interrupted.
"""

import asyncio
import logging
import os
import signal
import sys
import time

import sqlalchemy as sa

from faststream_sqla import SqlaBroker
from faststream_sqla.annotations import SqlaMessage

HANDLED = sa.table("chaos_handled", sa.column("value"), sa.column("pid"))

RECORD = (
    os.open(sys.argv[3], os.O_WRONLY | os.O_CREAT | os.O_APPEND) if len(sys.argv) > 3 else None
)
HANDLER_SECONDS = float(os.environ.get("HANDLER_SECONDS", "0"))

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
async def handle(value: int, message: SqlaMessage) -> None:
    if RECORD is None:
        async with broker.engine.begin() as conn:
            await conn.execute(sa.insert(HANDLED).values(value=value, pid=os.getpid()))
        return
    await asyncio.sleep(HANDLER_SECONDS)  # the work a real handler does
    raw = message.raw_message
    now = time.time()
    # a claim held through an outage is handled after it: failover.py tells claims apart
    # by when they were made, not when they were handled
    claimed = now - (time.monotonic() - raw.claimed_at_monotonic)
    line = f"{value} {os.getpid()} {raw.deliveries_count} {raw.token} {now:.6f} {claimed:.6f}\n"
    os.write(RECORD, line.encode())  # one append per line: whole lines, whatever the rest


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
