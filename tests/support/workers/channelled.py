"""One of several workers draining the queue "channelled", whose messages carry
channels with concurrency limits.

Usage: channelled.py DATABASE_URL. Prints READY once its broker is built, waits for a
line on stdin (so that all workers start consuming together), then records every
message it handles as a row (channel, pid, started_ns, finished_ns) in the table
`handled_channelled`. SIGTERM stops it gracefully.
"""

import asyncio
import logging
import os
import sys
import time

import sqlalchemy as sa
from together import consume_when_told  # a sibling: the script's directory

from faststream_sqla import SqlaBroker, SqlaMessage

handled = sa.table(
    "handled_channelled",
    sa.column("channel"), sa.column("pid"), sa.column("started_ns"), sa.column("finished_ns"),
)
logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
broker = SqlaBroker(sys.argv[1], logger=logging.getLogger("worker"))


@broker.subscriber(
    "channelled",
    max_workers=8,
    min_fetch_interval=0.0,
    max_fetch_interval=0.05,
    flush_interval=0.01,
)
async def handle(body: int, msg: SqlaMessage) -> None:
    # Wall-clock times: every process on this machine reads the same clock. The pause
    # lets handlers of one channel overlap, up to what the claim allows.
    started = time.time_ns()
    await asyncio.sleep(0.01)
    finished = time.time_ns()
    async with broker.engine.begin() as conn:
        await conn.execute(
            sa.insert(handled).values(
                channel=msg.channel, pid=os.getpid(), started_ns=started, finished_ns=finished
            )
        )


asyncio.run(consume_when_told(broker))
