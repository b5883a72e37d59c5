"""One idle subscriber for benchmarks.idle_cost:
``python -m benchmarks.apps.idle_subscriber URL on|off``.

A broker with one subscriber at its defaults (max_fetch_interval 1 s), its cross-process
wake-up source on or off. Prints READY once started (the source connected, when on),
then idles: each line on stdin is answered with `LOOKS <n>`, the looks its watcher has
made so far (0 without one). The end of stdin stops it.
"""

from __future__ import annotations

import asyncio
import sys

from faststream_sqla import SqlaBroker

QUEUE = "idle"


async def main(url: str, wakeups: bool) -> None:
    broker = SqlaBroker(url, logger=None, cross_process_wakeups=wakeups)

    @broker.subscriber(QUEUE)
    async def handle(body: str) -> None: ...

    await broker.start()
    source = broker.notifications
    if source is not None:
        await source.wait_connects(1)
    print("READY", flush=True)
    while await asyncio.to_thread(sys.stdin.readline):
        print(f"LOOKS {getattr(source, 'looks', 0)}", flush=True)
    await broker.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], {"on": True, "off": False}[sys.argv[2]]))
