"""One of several workers consuming one queue, recording what each handler call got.

Usage: recorder.py DATABASE_URL QUEUE. Prints READY once its broker is built, waits for
a line on stdin (so that all workers start consuming together), then records every
message it handles as a row (body, priority, pid, started_ns) in the table
`handled_any`, with the claim it came in (its claim's monotonic time). SIGTERM stops it gracefully.
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
    "handled_any", sa.column("body"), sa.column("priority"), sa.column("pid"),
    sa.column("started_ns"), sa.column("claim"),
)
logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
broker = SqlaBroker(sys.argv[1], logger=logging.getLogger("worker"))


@broker.subscriber(
    sys.argv[2], max_workers=4, min_fetch_interval=0.0, max_fetch_interval=0.05,
    flush_interval=0.01,
)
async def handle(body: str, msg: SqlaMessage) -> None:
    started = time.time_ns()
    async with broker.engine.begin() as conn:
        await conn.execute(
            sa.insert(handled).values(
                body=body, priority=msg.priority, pid=os.getpid(), started_ns=started,
                claim=msg.raw_message.claimed_at_monotonic,
            )
        )


asyncio.run(consume_when_told(broker))
