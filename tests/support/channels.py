"""Measures the channel tests share: how many handlers of a channel run at once, and when
claims happen."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from faststream_sqla import SqlaBroker, SqlaMessage
from tests.support.helpers import FAST, Recorder


class Concurrency:
    """How many handlers run at once, per channel, as the handlers see it."""

    def __init__(self) -> None:
        self.now: dict[str | None, int] = {}
        self.peak: dict[str | None, int] = {}
        self.total_now = 0
        self.total_peak = 0

    def enter(self, channel: str | None) -> None:
        self.now[channel] = self.now.get(channel, 0) + 1
        self.peak[channel] = max(self.peak.get(channel, 0), self.now[channel])
        self.total_now += 1
        self.total_peak = max(self.total_peak, self.total_now)

    def leave(self, channel: str | None) -> None:
        self.now[channel] -= 1
        self.total_now -= 1


def running_handler(
    got: Recorder,
    seen: Concurrency,
    pause: float = 0.02,
    until: Callable[[Concurrency], bool] | None = None,
):
    """`until`: the first handlers wait, once started, until `until(seen)` holds, so
    the limits a test expects are reached however slowly the machine claims."""
    reached = asyncio.Event()

    async def handle(body: Any, msg: SqlaMessage) -> None:
        seen.enter(msg.channel)
        try:
            if until is not None and not reached.is_set():
                if until(seen):
                    reached.set()
                else:
                    await reached.wait()
            await asyncio.sleep(pause)  # a handler doing I/O: overlap is possible
        finally:
            seen.leave(msg.channel)
        got.record((msg.channel, body))

    return handle


async def claim_times(
    database_url: str, publish: Callable[[SqlaBroker], Awaitable[None]], count: int
) -> list[Any]:
    """When each of `count` messages `publish` sends to "work" was claimed (the
    claim's time, database clock), in order."""
    broker = SqlaBroker(database_url)
    claimed_at = []
    got = Recorder()

    async def handle(body: Any, msg: SqlaMessage) -> None:
        claimed_at.append(msg.raw_message.acquired_at)
        got.record(body)

    broker.subscriber("work", max_workers=8, **FAST)(handle)
    async with broker:
        await broker.start()
        await publish(broker)
        await got.wait_for(count, timeout=60)
    return sorted(claimed_at)


def assert_at_most_per_second(times: list[Any], rate: int) -> None:
    for i, start in enumerate(times):
        in_window = [t for t in times[i:] if t - start < timedelta(seconds=1)]
        assert len(in_window) <= rate, times


def measured(
    broker: SqlaBroker,
    queue: str = "work",
    *,
    pause: float = 0.02,
    until: Callable[[Concurrency], bool] | None = None,
    **options: Any,
) -> tuple[Recorder, Concurrency]:
    """A subscriber on `queue` (FAST intervals unless `options` say otherwise) whose
    handler takes `pause` seconds (the first ones held `until`, see running_handler)
    and records `(channel, body)`; returns what it recorded and how many of its calls
    ran at once, per channel."""
    got, seen = Recorder(), Concurrency()
    handler = running_handler(got, seen, pause=pause, until=until)
    broker.subscriber(queue, **{**FAST, **options})(handler)
    return got, seen
