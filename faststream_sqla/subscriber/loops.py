"""What every loop behind a subscriber shares: waiting for an event or a timeout,
backing off after a failure, logging it once per streak, and stopping between database
operations rather than in the middle of one.

Each loop survives database errors: it logs, backs off and tries again, so a lost
connection delays work but never stops it or loses a message. The loops themselves:
the fetcher (fetcher.py), the outcome flusher (flusher.py) and the upkeep loops that
release stuck messages, renew leases and read the controls (upkeep.py).
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from faststream_sqla.health import DatabaseHealth

Log = Callable[..., None]


class Backoff:
    """Exponential delay with jitter for retrying a failing loop step."""

    def __init__(self, first: float = 0.05, cap: float = 5.0) -> None:
        self.first, self.cap, self.failures = first, cap, 0

    def next_delay(self) -> float:
        self.failures += 1
        return min(self.cap, self.first * 2 ** (self.failures - 1)) * (0.5 + random.random() / 2)

    def reset(self) -> None:
        self.failures = 0


async def wait_event(event: asyncio.Event, timeout: float) -> None:
    """Wait until `event` is set or `timeout` passes, whichever is first; always lets
    the loop turn at least once, as a caller that loops on a set event relies on."""
    if timeout <= 0 or event.is_set():
        await asyncio.sleep(0)
        return
    if sys.version_info < (3, 11):
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        return
    # in this task, not one of wait_for's: the waiter resumes one turn of the loop
    # after the event is set, not three (a channelled claim waits for idle workers so)
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        pass


def log_failure(
    log: Log, what: str, exc: BaseException, backoff: Backoff, health: DatabaseHealth
) -> None:
    if health.noticed(exc):
        return  # an outage: logged once by `health`, not per loop and per try
    # The first failure of a streak carries the traceback; repeats stay short.
    if backoff.failures <= 1:
        log(logging.WARNING, f"{what} failed, retrying: {exc!r}", exc_info=exc)
    else:
        log(logging.WARNING, f"{what} failed {backoff.failures} times in a row: {exc!r}")


class StoppableLoop:
    """A loop that stops between database operations, never in the middle of one.

    Cancelling a task mid-statement can leave its connection in an open transaction
    (on SQLite, holding the write lock the final flush then waits for), so stop()
    asks the loop to finish its current step and return.
    """

    def __init__(self) -> None:
        self.stopping = asyncio.Event()

    def request_stop(self) -> None:
        self.stopping.set()

    async def pause(self, seconds: float) -> bool:
        """Wait up to `seconds`; True if the loop should stop."""
        await wait_event(self.stopping, seconds)
        return self.stopping.is_set()
