"""One of several processes declaring the same schedule: "tick", every second, to the
queue "ticks" (nobody consumes it: the test reads the messages).

Usage: scheduler.py DATABASE_URL. Prints READY, waits for a line on stdin (so that all
start together), runs until SIGTERM, stops gracefully, then prints `FIRED n`: how many
ticks this process published.
"""

import asyncio
import logging
import signal
import sys

from faststream_sqla import SqlaBroker

logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
broker = SqlaBroker(sys.argv[1], logger=logging.getLogger("worker"))
# catch_up: a tick that comes late on a busy host is still fired, so "every tick once,
# no gaps" does not depend on the host's speed
broker.schedule("ticks", "tick", every=1, name="tick", missed="catch_up", catch_up_limit=100)


async def main() -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("READY", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    await broker.start()
    runner = broker.schedule_runner
    assert runner is not None
    try:
        await stop.wait()
    finally:
        await broker.stop()
    print(f"FIRED {runner.fired['tick']}", flush=True)


asyncio.run(main())
