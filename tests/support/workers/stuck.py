"""Worker that takes one message from "jobs" and hangs in its handler.

Usage: stuck.py DATABASE_URL. Prints `STARTED <message_id> <deliveries_count>` from
inside the handler, so the test knows the message is claimed before it SIGKILLs us.
"""

import asyncio
import logging
import sys

from faststream_sqla import SqlaBroker, SqlaMessage

# Logs go to stderr: stdout carries only the lines the test waits for.
logging.basicConfig(stream=sys.stderr, level=logging.INFO)
broker = SqlaBroker(sys.argv[1], logger=logging.getLogger("worker"))


# A large release_stuck_timeout: this process must not release its own claim.
@broker.subscriber(
    "jobs", release_stuck_timeout=60, min_fetch_interval=0.0, max_fetch_interval=0.05
)
async def hang(body: str, msg: SqlaMessage) -> None:
    print(f"STARTED {msg.message_id} {msg.deliveries_count}", flush=True)
    await asyncio.Event().wait()


async def main() -> None:
    await broker.start()
    await asyncio.Event().wait()


asyncio.run(main())
