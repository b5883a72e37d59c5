"""`QueueStateCollector`: what the queues hold, as Prometheus gauges, read through the
admin API (index ranges and capped counts only, see `faststream_sqla.admin.queues`).

A scrape never waits for the database: it is answered from the last reading, and a
reading older than `interval` starts a new one in the background. So however many
processes serve metrics and however often they are scraped, each reads the database
at most once per `interval`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, cast

import sqlalchemy as sa
from faststream.exceptions import IncorrectState
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.ext.asyncio import AsyncEngine

from faststream_sqla.admin import QueueAdmin
from faststream_sqla.broker.broker import SqlaBroker
from faststream_sqla.exceptions import InvalidOptionError, shown
from faststream_sqla.schema import validate_queue_name

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from faststream_sqla.admin.models import BreakerStatus, QueueStats, ReplicaLag

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 15.0
MIN_INTERVAL, MAX_INTERVAL = 0.1, 86_400.0

#: the states of `queue_depth`: waiting to be handled, each kind apart
DEPTH_STATES = ("ready", "scheduled", "retrying", "waiting")
#: the states of `circuit_breaker_state`, one series each (1 for the current one)
BREAKER_STATES = ("CLOSED", "OPEN", "HALF_OPEN")


class QueueStateCollector(Collector):
    """Gauges per queue: messages waiting by state (`<prefix>_queue_depth`), in flight
    (`_queue_in_flight`), failed in the last hour (`_queue_failed_last_hour`), the age of
    the oldest ready message (`_queue_oldest_ready_age_seconds`, 0 when none is ready),
    and when they were read (`_queue_state_read_timestamp_seconds`). Per circuit breaker
    that ever counted a failure, the queue's or a channel's (`channel` "" for the
    queue's): its state (`_circuit_breaker_state`, 1 for the current one of CLOSED,
    OPEN, HALF_OPEN) and its consecutive failures (`_circuit_breaker_failures`). When
    the admin reads from a replica (`read_url`): how far behind its primary it was at
    the reading (`_replica_lag_seconds`, NaN when the replica cannot tell).

    Counts stop at the admin API's cap (`exact_up_to`, 5,000 by default): at the cap a
    figure means "at least this many". Start it inside the application's event loop
    (`await collector.start()`, or `async with collector:`); it reads the queues then,
    and again only when a scrape finds the reading older than `interval` seconds.

    `source`: a `SqlaBroker` (read through its engine and tables once it is connected,
    so the collector can be built at import, next to the broker), a `QueueAdmin`, an
    `AsyncEngine` or a URL (then the collector owns its engine). `queues`: the queues to
    report (default: every queue with messages). `read_url`: a replica to read from
    (`QueueAdmin`'s `read_url`), with a source other than a `QueueAdmin`.
    """

    def __init__(
        self,
        source: SqlaBroker | QueueAdmin | AsyncEngine | str | sa.URL,
        *,
        queues: Sequence[str] | None = None,
        interval: float = DEFAULT_INTERVAL,
        metrics_prefix: str = "faststream_sqla",
        registry: CollectorRegistry | None = None,
        read_url: AsyncEngine | str | sa.URL | None = None,
    ) -> None:
        if (
            isinstance(interval, bool)
            or not isinstance(interval, (int, float))
            or not MIN_INTERVAL <= interval <= MAX_INTERVAL
        ):
            msg = (
                f"interval must be {MIN_INTERVAL} to {MAX_INTERVAL:g} seconds, got "
                f"{shown(interval)}"
            )
            raise InvalidOptionError(msg)
        if not isinstance(metrics_prefix, str) or not metrics_prefix.isidentifier():
            msg = (
                "metrics_prefix must be a name of letters, digits and _, got "
                f"{shown(metrics_prefix)}"
            )
            raise InvalidOptionError(msg)
        if read_url is not None and isinstance(source, QueueAdmin):
            msg = "give read_url to the QueueAdmin the collector reads through"
            raise InvalidOptionError(msg)
        self._read_url = read_url
        #: the broker whose engine the admin is made of at start, if given one
        self._broker = source if isinstance(source, SqlaBroker) else None
        self._owns_admin = not isinstance(source, QueueAdmin)
        self._admin: QueueAdmin | None = None
        if isinstance(source, QueueAdmin):
            self._admin = source
        elif self._broker is None:
            self._admin = QueueAdmin(cast("AsyncEngine | str | sa.URL", source), read_url=read_url)
        self.queues = None if queues is None else [validate_queue_name(q) for q in queues]
        self.interval = float(interval)
        self.prefix = metrics_prefix
        self._stats: list[QueueStats] = []
        self._breakers: list[BreakerStatus] = []
        self._lag: ReplicaLag | None = None
        #: time.time() of the last reading, and time.monotonic() to judge its age
        self._read_at: float | None = None
        self._read_monotonic = -math.inf
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reading: Future[None] | None = None
        if registry is not None:
            registry.register(self)

    @property
    def admin(self) -> QueueAdmin:
        """What the collector reads through (made at start when given a broker)."""
        if self._admin is None:
            msg = "the collector reads through the broker once started: await collector.start()"
            raise IncorrectState(msg)
        return self._admin

    # -- reading ------------------------------------------------------------------------
    async def start(self) -> None:
        """Read the queues once now; scrapes refresh the reading from this event loop."""
        if self._broker is not None and self._admin is None:
            broker = self._broker
            await broker.connect()  # no-op once the app started it; else connects it
            names = broker.tables.names
            self._admin = QueueAdmin(
                broker.engine,
                message_table=names.message,
                archive_table=names.archive,
                read_url=self._read_url,
            )
        self._loop = asyncio.get_running_loop()
        await self.refresh()

    async def stop(self) -> None:
        reading, self._reading, self._loop = self._reading, None, None
        if reading is not None:
            await asyncio.wrap_future(reading)
        if self._owns_admin and self._admin is not None:
            await self._admin.close()  # an engine of the broker's stays open: not ours
        if self._broker is not None:
            self._admin = None  # a restart reads through the broker's engine of then

    async def __aenter__(self) -> QueueStateCollector:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def refresh(self) -> None:
        """Read the queues now. A failed reading keeps the previous one and is logged;
        the next scrape after `interval` tries again."""
        try:
            # the lag first: the figures are at least as fresh as it says
            lag = await self.admin.replica_lag()
            stats = await self.admin.queues(self.queues, unknown_as_empty=True)
            breakers = await self.admin.breakers()
        except Exception:
            log.warning("could not read the queues' state for Prometheus", exc_info=True)
        else:
            self._lag = lag
            self._stats = stats
            wanted = None if self.queues is None else set(self.queues)
            self._breakers = [b for b in breakers if wanted is None or b.queue in wanted]
            self._read_at = time.time()
        self._read_monotonic = time.monotonic()

    def _refresh_if_stale(self) -> None:
        """From any thread: start a reading on the collector's loop when the last one is
        older than `interval` and none is under way. Never waits for it."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if time.monotonic() - self._read_monotonic < self.interval:
            return
        if self._reading is not None and not self._reading.done():
            return
        self._reading = asyncio.run_coroutine_threadsafe(self.refresh(), loop)

    # -- prometheus_client ---------------------------------------------------------------
    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        p = self.prefix
        return (
            GaugeMetricFamily(
                f"{p}_queue_depth",
                "Messages waiting in the queue, by state (ready, scheduled, retrying, waiting)",
                labels=("queue", "state"),
            ),
            GaugeMetricFamily(
                f"{p}_queue_in_flight", "Messages being handled (PROCESSING)", labels=("queue",)
            ),
            GaugeMetricFamily(
                f"{p}_queue_failed_last_hour",
                "Messages archived FAILED in the last hour",
                labels=("queue",),
            ),
            GaugeMetricFamily(
                f"{p}_queue_oldest_ready_age_seconds",
                "Seconds since the oldest ready message became due (0: none ready)",
                labels=("queue",),
            ),
            GaugeMetricFamily(
                f"{p}_queue_state_read_timestamp_seconds",
                "When these queue figures were read (Unix time)",
            ),
            GaugeMetricFamily(
                f"{p}_circuit_breaker_state",
                "A circuit breaker's state: 1 for the current one (channel '': the queue's)",
                labels=("queue", "channel", "state"),
            ),
            GaugeMetricFamily(
                f"{p}_circuit_breaker_failures",
                "A circuit breaker's consecutive failures (channel '': the queue's)",
                labels=("queue", "channel"),
            ),
            GaugeMetricFamily(
                f"{p}_replica_lag_seconds",
                "How far behind its primary the replica these figures are read from was "
                "(NaN: it cannot tell; absent: read from the primary)",
            ),
        )

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # the names alone: registering the collector must not read the database
        yield from self._families()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        self._refresh_if_stale()
        depth, in_flight, failed, oldest, read_at, breaker, failures, lag = self._families()
        for stats in self._stats:
            for state in DEPTH_STATES:
                depth.add_metric((stats.queue, state), getattr(stats, state).value)
            in_flight.add_metric((stats.queue,), stats.processing.value)
            failed.add_metric((stats.queue,), stats.failed_last_hour.value)
            oldest.add_metric((stats.queue,), stats.oldest_ready_age or 0.0)
        if self._read_at is not None:
            read_at.add_metric((), self._read_at)
        for status in self._breakers:
            channel = status.channel or ""
            for state in BREAKER_STATES:
                breaker.add_metric((status.queue, channel, state), float(status.state == state))
            failures.add_metric((status.queue, channel), status.consecutive_failures)
        if self._lag is not None:
            lag.add_metric((), math.nan if self._lag.seconds is None else self._lag.seconds)
        yield from (depth, in_flight, failed, oldest, read_at, breaker, failures, lag)
