"""How a worker script runs beside others: build the broker, print READY, wait for a
line on stdin (the test sends it to every worker at once, so none gets a head start),
consume until SIGTERM, then stop gracefully."""

import asyncio
import signal
import sys

from faststream_sqla import SqlaBroker


async def consume_when_told(broker: SqlaBroker) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("READY", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    await broker.start()
    try:
        await stop.wait()
    finally:
        await broker.stop()
