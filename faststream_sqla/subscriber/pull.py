"""Pulling without a handler (`get_one()`, `async for msg in subscriber`): claim one
message at a time through the subscriber's Claimer, and settle it when the caller
acks, nacks or rejects it. Nobody keeps a pulled message's lease."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from faststream_sqla import lifecycle, ordering
from faststream_sqla.drivers import controls
from faststream_sqla.drivers.base import Outcome, reading, with_retries
from faststream_sqla.message import KEEP_STATE, ClaimedMessage

from .claimer import Claimer
from .loops import wait_event
from .upkeep import CONTROL_INTERVAL

if TYPE_CHECKING:
    from faststream_sqla.broker_config import SqlaBrokerConfig

    from .config import ConsumeOptions


class Pull:
    """One subscriber's pulls. The broker's config is asked for at each pull: a
    subscriber is built before its broker connects, and a router may move it to
    another broker."""

    def __init__(
        self,
        broker_config: Callable[[], SqlaBrokerConfig],
        queues: Sequence[str],
        options: ConsumeOptions,
    ) -> None:
        self.broker_config, self.queues, self.options = broker_config, queues, options
        #: per queue, what the last pull read of its controls: (when, paused, channelled)
        self._controls: dict[str, tuple[float, bool, bool]] = {}

    async def next_message(self, timeout: float) -> ClaimedMessage | None:
        """Claim one message of the queues, waiting up to `timeout` seconds for one."""
        wakeups = self.broker_config().wakeups
        wake = asyncio.Event()
        wakeups.register(self.queues, wake)
        try:
            deadline = time.monotonic() + timeout
            while True:
                wake.clear()
                raw = await self._claim_one()
                if raw is not None:
                    return raw
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                await wait_event(wake, min(remaining, self.options.max_fetch_interval))
        finally:
            wakeups.unregister(self.queues, wake)

    async def _claim_one(self) -> ClaimedMessage | None:
        driver, opts = self.broker_config().driver, self.options
        claimer = Claimer(
            driver, self.broker_config().engine, channel_breakers=opts.circuit_breaker_per_channel
        )
        for queue in self.queues:

            async def claim(queue: str = queue) -> list[ClaimedMessage]:
                paused, channelled = await self._read_controls(queue)
                if paused:
                    return []
                if not channelled:
                    rows = await claimer.claim(queue, 1, channelled=False)
                    if rows:
                        return rows
                    # nothing without a channel: it may have channelled messages now
                    paused, channelled = await self._read_controls(queue, fresh=True)
                    if paused or not channelled:
                        return []
                return await claimer.claim(queue, 1, channelled=True)

            while claimed := await with_retries(driver, claim):
                raw = claimed[0]
                settled = lifecycle.before_handler(
                    raw, opts.max_deliveries, raw.claimed_at_monotonic
                )
                if settled is not None:
                    await self._write_now(settled, raw)
                    continue
                raw.settle = self._settle_now
                return raw
        return None

    async def _read_controls(self, queue: str, *, fresh: bool = False) -> tuple[bool, bool]:
        """Whether `queue` is paused and whether the channel claim serves it, as a
        pull sees them: read at most once per CONTROL_INTERVAL, as consumers with
        handlers read them (upkeep.ControlWatcher), unless `fresh`."""
        now = time.monotonic()
        seen = self._controls.get(queue)
        if not fresh and seen is not None and now - seen[0] < CONTROL_INTERVAL:
            return seen[1], seen[2]
        driver, engine = self.broker_config().driver, self.broker_config().engine
        async with reading(engine) as conn:
            found = await controls.claim_controls(conn, driver.tables, [queue])
        paused, channelled = queue in found.paused, queue in found.channelled
        self._controls[queue] = (now, paused, channelled)
        return paused, channelled

    async def _write_now(self, outcome: Outcome, raw: ClaimedMessage) -> None:
        driver, engine = self.broker_config().driver, self.broker_config().engine

        async def write() -> int:
            if outcome.saved_state is not KEEP_STATE:
                await driver.save_states(engine, [outcome])
            return await driver.write_outcomes(engine, [outcome])

        await with_retries(driver, write)
        if raw.ordering_key is not None and outcome.archives:
            keys = {(raw.queue, raw.ordering_key)}
            await with_retries(driver, lambda: ordering.release_next(driver, engine, keys))

    async def _settle_now(self, raw: ClaimedMessage) -> None:
        now = lifecycle.db_time(raw, time.monotonic())
        await self._write_now(
            lifecycle.after_attempt(
                raw,
                started_at=now,
                finished_at=now,
                error=None,
                retry_strategy=self.options.retry_strategy,
            ),
            raw,
        )
