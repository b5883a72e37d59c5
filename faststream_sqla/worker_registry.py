"""This broker process's row in the workers table: who is running.

A started broker inserts one row, once its schema is checked, rewrites it as often as
its subscribers renew their leases (and at least every `REFRESH_INTERVAL`), and deletes
it at a graceful stop. The row names the queues the process consumes, how many
handlers it runs, and the ids of the messages it holds: who holds a PROCESSING message
is read from there, so that claims write nothing more. A process that is killed, or
cut off from the database, stops refreshing; readers call it gone once it has been
silent for `silent_after` (`SILENT_REFRESHES` refreshes), by the database clock. Rows
silent for `PRUNE_AFTER` are deleted by the next process that registers or refreshes.

One refresh per process, whatever its number of subscribers: one short transaction
per interval. The registry never fails the broker: a failed write is logged once per
streak (an outage once, by `DatabaseHealth`), and the next refresh inserts the row
again if it went missing meanwhile.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from faststream_sqla.drivers import workers as store
from faststream_sqla.drivers.base import with_retries
from faststream_sqla.drivers.workers import WorkerIdentity, WorkerLoad
from faststream_sqla.schema import MAX_HOST_LENGTH, MAX_VERSION_LENGTH

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from faststream_sqla.drivers import Driver
    from faststream_sqla.health import DatabaseHealth

Log = Callable[[int, str], None]

#: the longest pause between two refreshes of a row; shorter when a subscriber renews
#: its leases more often (every release_stuck_timeout / 3)
REFRESH_INTERVAL = 10.0
#: the shortest pause, whatever the leases
MIN_REFRESH_INTERVAL = 0.05
#: refreshes a row may miss before its process counts as gone
SILENT_REFRESHES = 3
#: a row silent this long (seconds) is deleted: long past gone, still there to be seen
#: for a while after a crash
PRUNE_AFTER = 3600.0
#: seconds between two prunes by one process
PRUNE_EVERY = 600.0


@functools.cache
def package_version() -> str:
    # read once: the installed metadata does not change under a running process, and
    # reading it parses the distribution's METADATA file (milliseconds, at every start)
    try:
        return metadata.version("faststream-sqla")[:MAX_VERSION_LENGTH]
    except metadata.PackageNotFoundError:
        return "unknown"


@dataclass(eq=False)
class ConsumerLoad:
    """One subscriber's part of its process's row, read at each refresh."""

    queues: Sequence[str]
    #: the messages it holds, by id (claimed, not yet settled)
    held: Mapping[int, Any]
    #: how many of its handlers run now
    running: Callable[[], int]
    #: how often it renews its leases, in seconds
    lease_interval: float


class WorkerRegistry:
    """One per broker: its row in the workers table while it runs."""

    def __init__(self) -> None:
        self.identity: WorkerIdentity | None = None
        self.log: Log = lambda _level, _message: None
        self._consumers: list[ConsumerLoad] = []
        self._engine: AsyncEngine | None = None
        self._driver: Driver | None = None
        self._health: DatabaseHealth | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping: asyncio.Event | None = None
        self._failing = False
        self._pruned_at = 0.0
        #: rows inserted again because a refresh found none, and writes that failed
        #: (read by tests)
        self.reinserted = self.failures = 0

    def connect(
        self, engine: AsyncEngine, driver: Driver, log: Log, health: DatabaseHealth
    ) -> None:
        self._engine, self._driver, self.log, self._health = engine, driver, log, health

    @property
    def running(self) -> bool:
        return self._task is not None

    def attach(self, consumer: ConsumerLoad) -> None:
        self._consumers.append(consumer)

    def detach(self, consumer: ConsumerLoad) -> None:
        if consumer in self._consumers:
            self._consumers.remove(consumer)

    @property
    def interval(self) -> float:
        """Seconds between two refreshes: as often as the most frequent lease renewal,
        at most `REFRESH_INTERVAL`."""
        fastest = min((c.lease_interval for c in self._consumers), default=REFRESH_INTERVAL)
        return max(MIN_REFRESH_INTERVAL, min(REFRESH_INTERVAL, fastest))

    def load(self) -> WorkerLoad:
        consumers = list(self._consumers)
        return WorkerLoad(
            queues=sorted({q for c in consumers for q in c.queues}),
            in_flight=sum(c.running() for c in consumers),
            holding=sorted(i for c in consumers for i in list(c.held)),
            silent_after=SILENT_REFRESHES * self.interval,
        )

    async def start(self) -> None:
        """Insert this process's row under a new id and refresh it from now on."""
        if self._task is not None:
            return
        self.identity = WorkerIdentity(
            worker_id=uuid.uuid4().hex,
            host=socket.gethostname()[:MAX_HOST_LENGTH],
            pid=os.getpid(),
            version=package_version(),
        )
        self._failing = False
        self._pruned_at = time.monotonic()
        await self._write(first=True)
        self._stopping = asyncio.Event()
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stop refreshing and delete the row (a graceful stop)."""
        if self._task is None or self._stopping is None:
            return
        self._stopping.set()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task = None
        identity, engine, driver = self.identity, self._engine, self._driver
        if identity is None or engine is None or driver is None:
            return

        async def delete() -> None:
            async with driver.own_transaction(engine) as conn:
                await store.forget(conn, driver.tables.workers, identity.worker_id)

        try:
            await with_retries(driver, delete)
        except Exception as exc:
            self._failed(exc, "deleting this process's row from the workers table")

    async def refresh_once(self) -> None:
        await self._write(first=False)

    async def _run(self) -> None:
        assert self._stopping is not None
        while True:
            try:
                await asyncio.wait_for(self._stopping.wait(), self.interval)
            except asyncio.TimeoutError:
                await self._write(first=False)
            else:
                return

    async def _write(self, *, first: bool) -> None:
        identity, engine, driver = self.identity, self._engine, self._driver
        assert identity is not None and engine is not None and driver is not None
        load = self.load()
        table = driver.tables.workers
        prune = first or time.monotonic() - self._pruned_at >= PRUNE_EVERY

        async def write() -> bool:
            async with driver.own_transaction(engine) as conn:
                if first:
                    await store.register(conn, table, identity, load)
                    kept = True
                else:
                    kept = await store.refresh(conn, table, identity, load)
                if prune:
                    await store.prune(conn, table, PRUNE_AFTER)
                return kept

        try:
            kept = await with_retries(driver, write)
        except Exception as exc:
            self._failed(exc, "writing this process's row in the workers table")
            return
        if prune:
            self._pruned_at = time.monotonic()
        if not kept:
            self.reinserted += 1
        if self._failing:
            self._failing = False
            self.log(logging.INFO, "the workers table is written again")

    def _failed(self, exc: BaseException, what: str) -> None:
        self.failures += 1
        if self._health is not None and self._health.noticed(exc):
            return  # an outage: logged once by DatabaseHealth
        if self._failing:
            return  # once per streak of failures
        self._failing = True
        self.log(
            logging.WARNING,
            f"{what} failed ({type(exc).__name__}: {exc}); the process is not listed "
            "among the workers until a later refresh succeeds",
        )
