"""A worker of the queue "downstream" whose handlers call a downstream service that
fails or hangs, with a circuit breaker (threshold 3, cooldown 3 s, 5 s lease) and two
workers.

Usage: downstream.py DATABASE_URL. Prints READY, waits for a line on stdin, then
consumes; prints "STARTED <body> <delivery>" as each handler starts. What a handler
does follows its body:
  fail   raises (the downstream is down)
  hang   waits until a second line arrives on stdin (the downstream hangs)
  probe  hangs on its first delivery, succeeds on the next (the downstream recovered)
SIGTERM stops it gracefully.
"""

import asyncio
import logging
import signal
import sys

from faststream_sqla import SqlaBroker, SqlaMessage
from faststream_sqla.retry import ConstantRetryStrategy

logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
broker = SqlaBroker(sys.argv[1], logger=logging.getLogger("worker"))
released = asyncio.Event()


@broker.subscriber(
    "downstream",
    max_workers=2,
    circuit_breaker_threshold=3,
    circuit_breaker_cooldown=3,
    release_stuck_timeout=5,
    retry_strategy=ConstantRetryStrategy(delay_seconds=0.05, max_attempts=1),
    min_fetch_interval=0.0,
    max_fetch_interval=0.05,
    flush_interval=0.01,
)
async def handle(body: str, msg: SqlaMessage) -> None:
    print("STARTED", body, msg.deliveries_count, flush=True)
    if body == "fail":
        raise RuntimeError("downstream is down")
    if body == "hang" or (body == "probe" and msg.deliveries_count == 1):
        await released.wait()


async def main() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print("READY", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    await broker.start()

    async def release_on_second_line() -> None:
        await asyncio.to_thread(sys.stdin.readline)
        released.set()

    releasing = asyncio.create_task(release_on_second_line())
    try:
        await stop.wait()
    finally:
        releasing.cancel()
        await broker.stop()


asyncio.run(main())
