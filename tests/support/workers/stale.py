"""Worker for the stopped-past-its-lease test: its handler for the body "slow" waits for
a line on stdin before returning.

Usage: stale.py DATABASE_URL. Prints `STARTED <message_id> <deliveries_count>` when a
handler begins and `HANDLED <message_id>` when it returns. The lease is short (1.5 s, so
renewals every 0.5 s) and this process's own release-stuck rarely runs, so that the test
can stop it (SIGSTOP) between two of its statements and let another process take over.
"""

import asyncio
import logging
import sys

from faststream_sqla import SqlaBroker, SqlaMessage

# Logs go to stderr: stdout carries only the lines the test waits for.
logging.basicConfig(stream=sys.stderr, level=logging.INFO)
broker = SqlaBroker(sys.argv[1], logger=logging.getLogger("worker"))


@broker.subscriber(
    "jobs", release_stuck_timeout=1.5, release_stuck_interval=60, fetch_batch_size=1,
    min_fetch_interval=0.0, max_fetch_interval=0.2, flush_interval=0.01,
)
async def handle(body: str, msg: SqlaMessage) -> None:
    print(f"STARTED {msg.message_id} {msg.deliveries_count}", flush=True)
    if body == "slow":
        await asyncio.to_thread(sys.stdin.readline)
    print(f"HANDLED {msg.message_id}", flush=True)


async def main() -> None:
    await broker.start()
    await asyncio.Event().wait()


asyncio.run(main())
