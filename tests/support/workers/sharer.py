"""One of several workers draining the queue "shared".

Usage: sharer.py DATABASE_URL. Prints READY once its broker is built, waits for a line
on stdin (so that all workers start consuming together), then records every value it
handles as a row (value, pid) in the table `handled`. SIGTERM stops it gracefully.
"""

import asyncio
import logging
import os
import sys

import sqlalchemy as sa
from together import consume_when_told  # a sibling: the script's directory

from faststream_sqla import SqlaBroker

handled = sa.table("handled", sa.column("value"), sa.column("pid"))
# Logs go to stderr: stdout carries only the lines the test waits for.
logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
broker = SqlaBroker(sys.argv[1], logger=logging.getLogger("worker"))


@broker.subscriber(
    "shared",
    max_workers=4,
    min_fetch_interval=0.0,
    max_fetch_interval=0.05,
    flush_interval=0.01,
)
async def handle(value: int) -> None:
    # The broker's engine carries the driver's settings (SQLite busy timeout, ...).
    async with broker.engine.begin() as conn:
        await conn.execute(sa.insert(handled).values(value=value, pid=os.getpid()))


asyncio.run(consume_when_told(broker))
