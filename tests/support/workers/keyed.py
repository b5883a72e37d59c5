"""One of several workers draining the queue "keyed", whose messages carry ordering keys.

Usage: keyed.py DATABASE_URL. Prints READY once its broker is built, waits for a line on
stdin (so that all workers start consuming together), then records every message it
handles as a row (key, seq, pid, started_ns, finished_ns) in the table `handled_keyed`.
SIGTERM stops it gracefully.
"""

import asyncio
import logging
import os
import sys
import time

import sqlalchemy as sa
from together import consume_when_told  # a sibling: the script's directory

from faststream_sqla import SqlaBroker

handled = sa.table(
    "handled_keyed",
    sa.column("key"), sa.column("seq"), sa.column("pid"),
    sa.column("started_ns"), sa.column("finished_ns"),
)
logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
broker = SqlaBroker(sys.argv[1], logger=logging.getLogger("worker"))


@broker.subscriber(
    "keyed",
    max_workers=4,
    min_fetch_interval=0.0,
    max_fetch_interval=0.05,
    flush_interval=0.01,
)
async def handle(body: dict) -> None:
    # Wall-clock times: every process on this machine reads the same clock. The pause
    # gives a second handler of the same key the chance to overlap, were one running.
    started = time.time_ns()
    await asyncio.sleep(0.002)
    finished = time.time_ns()
    async with broker.engine.begin() as conn:
        await conn.execute(
            sa.insert(handled).values(
                key=body["key"], seq=body["seq"], pid=os.getpid(),
                started_ns=started, finished_ns=finished,
            )
        )


asyncio.run(consume_when_told(broker))
