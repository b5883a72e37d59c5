"""The upkeep loops of a subscriber: release stuck messages, renew the leases of the
messages this process holds, and read the controls (pause, channels, breakers)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from faststream_sqla import ordering
from faststream_sqla.drivers import controls
from faststream_sqla.drivers.base import reading, with_retries

from .loops import Backoff, Log, StoppableLoop, log_failure

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from faststream_sqla.drivers import Driver
    from faststream_sqla.health import DatabaseHealth
    from faststream_sqla.message import ClaimedMessage

    from .breaker import Breakers
    from .config import ConsumeOptions
    from .fetcher import Fetcher


class StuckReleaser(StoppableLoop):
    """Puts this subscriber's queues' long-PROCESSING messages back to PENDING: those
    of processes that died or lost the database, never this process's own."""

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        driver: Driver,
        queues: Sequence[str],
        options: ConsumeOptions,
        held: dict[int, ClaimedMessage],
        claiming: asyncio.Lock,
        on_released: Callable[[], None],
        log: Log,
        health: DatabaseHealth,
    ) -> None:
        super().__init__()
        self.health = health
        self.engine, self.driver, self.queues = engine, driver, list(queues)
        self.options, self.held, self.on_released, self.log = options, held, on_released, log
        self.claiming = claiming
        #: per queue, the ordering key after which the next sweep looks
        self._sweep_from: dict[str, str] = {}

    async def release_once(self) -> int:
        async def release() -> int:
            # What this process holds is never stuck, however late its renewal: a
            # handler that blocks the event loop holds back the LeaseKeeper too, and
            # without this the process took back its own running messages.
            return await self.driver.release_stuck(
                self.engine, self.queues, self.options.release_stuck_timeout, list(self.held)
            )

        # No claim of this process runs meanwhile: a message it claimed after the held
        # ids were read, while a blocking handler delayed the statement past the
        # timeout, would otherwise look stuck.
        async with self.claiming:
            count = await with_retries(self.driver, release)
        for queue in self.queues:
            # messages left WAITING for an ordering key by a process that died between
            # a commit and its release (faststream_sqla.ordering)
            released, self._sweep_from[queue] = await with_retries(
                self.driver,
                functools.partial(
                    ordering.sweep,
                    self.driver,
                    self.engine,
                    queue,
                    self._sweep_from.get(queue, ""),
                ),
            )
            if released:
                self.on_released()
        if count:
            self.log(
                logging.WARNING,
                f"released {count} messages stuck in PROCESSING for more than "
                f"{self.options.release_stuck_timeout}s",
            )
            self.on_released()
        return count

    async def run(self) -> None:
        backoff = Backoff()
        while not await self.pause(self.options.release_stuck_interval):
            try:
                await self.release_once()
                backoff.reset()
            except Exception as exc:
                log_failure(self.log, "releasing stuck messages", exc, backoff, self.health)


#: seconds between two reads of the controls table by a subscriber: how soon a pause
#: or a resume reaches every process
CONTROL_INTERVAL = 2.0


class ControlWatcher(StoppableLoop):
    """Reads what operators set for this subscriber's queues (paused or not) every
    `CONTROL_INTERVAL`, one small statement, and tells the fetcher. With circuit
    breakers, the same statement reads them too, and the watcher takes the probe of a
    breaker whose reopening is due, and shows it still holds its probes
    (subscriber.breaker)."""

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        driver: Driver,
        queues: Sequence[str],
        fetcher: Fetcher,
        wake: asyncio.Event,
        log: Log,
        health: DatabaseHealth,
        interval: float = CONTROL_INTERVAL,
        breakers: Breakers | None = None,
    ) -> None:
        super().__init__()
        self.engine, self.driver, self.queues = engine, driver, list(queues)
        self.fetcher, self.wake, self.log, self.health = fetcher, wake, log, health
        self.interval = interval
        self.breakers = breakers

    async def read_once(self) -> None:
        # one transaction, and without breakers one statement: every idle process runs
        # this every CONTROL_INTERVAL
        breakers = self.breakers
        silent_after = breakers.silent_after if breakers is not None else 0.0
        versions = breakers.versions() if breakers is not None else None

        async def read() -> tuple[controls.ClaimControls, dict[str, controls.ControlReading]]:
            async with reading(self.engine) as conn:
                found = await controls.claim_controls(conn, self.driver.tables, self.queues)
                if breakers is None:
                    return found, {}
                readings = await controls.controls_among(
                    conn, self.driver.tables, self.queues, silent_after
                )
                return found, readings

        found, readings = await with_retries(self.driver, read)
        self._take_channelled(found.channelled)
        if breakers is None:
            self._take_paused(found.paused)
            return
        assert versions is not None
        self._take_paused(frozenset(q for q, reading_ in readings.items() if reading_.paused))
        await breakers.observe(readings, versions)

    def _take_channelled(self, channelled: frozenset[str]) -> None:
        before = self.fetcher.channelled
        if channelled != before:
            self.fetcher.channelled = channelled
            for queue in sorted(channelled - before):
                self.log(
                    logging.INFO,
                    f"queue {queue!r} has channels or limits: claims follow them, "
                    "for idle workers only",
                )
            self.wake.set()

    def _take_paused(self, paused: frozenset[str]) -> None:
        before = self.fetcher.paused
        if paused == before:
            return
        self.fetcher.paused = paused
        for queue in sorted(paused - before):
            self.log(logging.INFO, f"queue {queue!r} is paused: no more claims until resumed")
        if resumed := sorted(before - paused):
            for queue in resumed:
                self.log(logging.INFO, f"queue {queue!r} is resumed")
            self.wake.set()

    async def run(self) -> None:
        backoff = Backoff()
        delay = 0.0
        while not await self.pause(delay):
            try:
                await self.read_once()
                backoff.reset()
                delay = self.interval
            except Exception as exc:
                log_failure(self.log, "reading the queue controls", exc, backoff, self.health)
                delay = min(backoff.next_delay(), self.interval)
            finally:
                self.fetcher.controls_read.set()


class LeaseKeeper(StoppableLoop):
    """Renews the claim of every message this subscriber holds, prefetched or running.

    One statement renews them all. A message's lease lapses only when its process
    stops renewing it (killed, or cut off from the database), so release-stuck never
    takes a message from a live worker because it waited in the buffer or ran long.
    """

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        driver: Driver,
        held: dict[int, ClaimedMessage],
        interval: float,
        log: Log,
        health: DatabaseHealth,
    ) -> None:
        super().__init__()
        self.engine, self.driver, self.held, self.log = engine, driver, held, log
        self.health = health
        self.interval = interval

    async def renew_once(self) -> int:
        leases = [(raw.id, raw.token) for raw in list(self.held.values())]
        if not leases:
            return 0

        async def renew() -> int:
            return await self.driver.extend_leases(self.engine, leases)

        return await with_retries(self.driver, renew)

    async def run(self) -> None:
        backoff = Backoff(cap=self.interval)
        delay = self.interval
        while not await self.pause(delay):
            try:
                await self.renew_once()
                backoff.reset()
                delay = self.interval
            except Exception as exc:
                log_failure(self.log, "renewing leases", exc, backoff, self.health)
                delay = backoff.next_delay()
