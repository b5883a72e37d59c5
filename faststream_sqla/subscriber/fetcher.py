"""The fetcher: claims batches of messages into the prefetch buffer."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from faststream_sqla.channels.read_ahead import ReadAhead, ReadsAhead
from faststream_sqla.drivers.base import with_retries
from faststream_sqla.wakeup import COVERED_POLL_FACTOR

from .claim_size import ClaimSizer
from .flusher import FLUSH_CONCURRENCY, flush_batch_size
from .loops import Backoff, Log, log_failure, wait_event

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from faststream_sqla.drivers import Driver
    from faststream_sqla.health import DatabaseHealth
    from faststream_sqla.message import ClaimedMessage

    from .breaker import Breakers
    from .buffer import PrefetchBuffer
    from .claimer import Claimer
    from .config import ConsumeOptions

#: deliveries a worker makes between yields to the event loop (delivery.Delivery.work)
DELIVERIES_PER_YIELD = 8
#: the longest random pause, in seconds, before a channel claim that lost to other
#: processes' claims tries again
CONTENDED_PAUSE = 0.02


class Fetcher:
    """Claims batches into the prefetch buffer.

    It fetches only when a whole batch fits (so a backlog is claimed in full batches,
    not one row per freed slot), soon after a full batch, and otherwise when woken by
    a publish or when `max_fetch_interval` passes.
    """

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        driver: Driver,
        queues: Sequence[str],
        options: ConsumeOptions,
        buffer: PrefetchBuffer,
        wake: asyncio.Event,
        on_claimed: Callable[[list[ClaimedMessage]], list[ClaimedMessage]],
        on_resized: Callable[[int], None],
        unsettled: Callable[[], int],
        claiming: asyncio.Lock,
        log: Log,
        health: DatabaseHealth,
        claimer: Claimer,
        on_short_claim: Callable[[], None] | None = None,
        covered: Callable[[], bool] = lambda: False,
    ) -> None:
        self.engine, self.driver, self.queues = engine, driver, list(queues)
        self.claimer = claimer
        #: called when a channelled claim took less than its idle workers' room: the
        #: channels' slots may be held by handled messages whose outcomes wait to be
        #: written
        self.on_short_claim = on_short_claim
        self.options, self.buffer, self.wake, self.log = options, buffer, wake, log
        self.health = health
        #: whether a wake-up watcher checks for this process's due messages (WakeupHub)
        self.covered = covered
        #: claim rounds made since start
        self.claim_rounds = 0
        #: held while a claim is in flight (see StuckReleaser)
        self.claiming = claiming
        self.on_claimed, self.on_resized, self.unsettled = on_claimed, on_resized, unsettled
        self.sizer = ClaimSizer(
            smallest=options.fetch_batch_size,
            largest=options.largest_claim,
            overfetch_factor=options.overfetch_factor,
        )
        self._apply_size()
        # The buffer's take count at the last claim, and when: the rate the workers
        # took messages between claims is what the sizer judges by.
        self._taken_at_claim = 0
        self._claimed_at = time.monotonic()
        #: set to wake a fetcher that waits for room; workers yield at every message
        #: while it is set, so the fetcher gets its turn promptly
        self.space = asyncio.Event()
        self.awaiting_space = False
        #: True while a claim that takes several round trips is in flight (never for a
        #: one-statement claim). A reply waits for the event loop's next turn, up to
        #: DELIVERIES_PER_YIELD deliveries per worker, and MariaDB's four-statement
        #: claim paid that four times while the buffer ran dry. So while the buffer
        #: holds less than those turns' deliveries, workers yield at every delivery.
        self.claim_in_flight = False
        self._hurry_claims = driver.claim_round_trips > 1
        self.hurry_below = driver.claim_round_trips * options.max_workers * DELIVERIES_PER_YIELD
        self.stopping = False
        self._rotation = 0
        #: queues an operator paused (ControlWatcher keeps it current): not claimed
        self.paused: frozenset[str] = frozenset()
        #: queues with channels or limits (ControlWatcher keeps it current): claimed by
        #: the channel claim, and only for idle workers (see idle_room)
        self.channelled: frozenset[str] = frozenset()
        #: messages one worker takes at a time (a batch subscriber's whole batch)
        self.per_worker = 1
        #: set once the controls were first read: no claim comes before that
        self.controls_read = asyncio.Event()
        #: the circuit breakers of the queues, if the subscriber has them
        self.breakers: Breakers | None = None
        #: the channelled queues' next claims, read while the workers are busy
        self.reads_ahead = ReadsAhead(driver, engine)

    def _apply_size(self) -> None:
        self.batch_size = self.sizer.size
        self.capacity = self.sizer.capacity
        # Claimed but not yet written back: buffered, running, or waiting in the flusher.
        # Twice the normal working set; past it, claiming waits for outcomes to be
        # written, so a slow or failing flush cannot grow memory without bound. The
        # working set counts the flusher's part too: a batch gathering and as many being
        # written as it runs at once. Without it a busy drain reached the limit in about
        # half its claim rounds, and those claims waited for outcomes to be written.
        flushing = (FLUSH_CONCURRENCY + 1) * flush_batch_size(self.batch_size, self.options)
        self.max_unsettled = 2 * (self.capacity + self.options.max_workers + flushing)

    def _resize(self) -> None:
        """Judge the claim size by the rate the workers took messages since the last
        claim."""
        now, taken = time.monotonic(), self.buffer.taken
        if self.sizer.observe(taken - self._taken_at_claim, now - self._claimed_at):
            self._apply_size()
            self.on_resized(self.batch_size)
        self._taken_at_claim, self._claimed_at = taken, now

    def free_slots(self) -> int:
        return min(self.capacity - len(self.buffer), self.max_unsettled - self.unsettled())

    def notify_taken(self) -> None:
        """Called when room may have appeared: a message taken, outcomes written.
        Called once per message, so it is kept to a few comparisons."""
        if self.awaiting_space and self.free_slots() >= self.batch_size:
            self.awaiting_space = False
            self.space.set()

    def idle_room(self) -> int:
        """With channels, what a claim may take: only what idle workers start at once,
        so no buffered message holds a channel's slot while the workers are busy with
        other work."""
        room = self.buffer.idle_workers * self.per_worker - len(self.buffer)
        return min(room, self.max_unsettled - self.unsettled())

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            await self.reads_ahead.close()

    async def _run(self) -> None:
        backoff = Backoff()
        await self.controls_read.wait()
        while not self.stopping:
            if self.health.is_down:
                # Nothing claimed until the database answers and the checks before
                # resuming are done (recovery.py reads the buffered claims then).
                self.wake.clear()
                await self.health.until_reachable(self.wake)
                continue
            batch = self.batch_size
            if self.channelled:
                batch = self.idle_room()
                if batch <= 0:
                    self.buffer.worker_idle.clear()
                    await wait_event(self.buffer.worker_idle, self.options.max_fetch_interval)
                    # the workers finishing in this turn of the loop go idle together:
                    # one claim for all of them, not one each (unless none is busy)
                    if self.buffer.idle_workers < self.options.max_workers:
                        await asyncio.sleep(0)
                    continue
            elif self.free_slots() < batch:
                # Cleared once the fetcher runs again, not when its claim ends: left set
                # through a claim, it had every worker yield at every message meanwhile.
                self.awaiting_space = True
                await self.space.wait()
                self.space.clear()
                continue
            # Cleared before claiming: a publish during the claim triggers another.
            self.wake.clear()
            self.claim_in_flight = self._hurry_claims
            try:
                got = await self.claim_round(batch)
            except Exception as exc:
                delay = backoff.next_delay()
                log_failure(self.log, "claiming messages", exc, backoff, self.health)
                if self.health.is_down:
                    # no claim can succeed before the database is back (or a stop)
                    await self.health.until_reachable(self.wake)
                else:
                    await wait_event(self.wake, delay)  # stop() wakes it at once
                continue
            finally:
                self.claim_in_flight = False
            if self.health.is_down:
                continue  # the round stopped short for an outage: wait for the database
            backoff.reset()
            if not self.channelled:
                self._resize()
            elif got < batch and self.on_short_claim is not None:
                self.on_short_claim()
            if self.channelled and got == 0 and self.claimer.contended:
                # other processes' claims kept winning the race: what they left may be
                # claimable, and the next wake-up may be a poll away
                await wait_event(self.wake, random.uniform(0, CONTENDED_PAUSE))
                continue
            # with channels, a claim that took anything may have left limits with room
            full = got > 0 if self.channelled else got >= batch
            if full and self.options.min_fetch_interval <= 0:
                # More is likely waiting: claim again at once. Yielding first
                # (sleep(0)) cost a full turn of every busy worker, up to 8 deliveries
                # each, before the next claim was even sent; a claim yields to the
                # workers anyway while it waits for the database.
                continue
            wait = self.options.min_fetch_interval if full else self.idle_wait()
            await wait_event(self.wake, wait)

    def idle_wait(self) -> float:
        """How long to wait for a wake-up after a claim that left the workers room:
        `max_fetch_interval`, or a safety net's longer wait while a watcher checks for
        due messages instead (not for channelled queues, which it cannot judge)."""
        if self.covered() and not self.channelled:
            return self.options.max_fetch_interval * COVERED_POLL_FACTOR
        return self.options.max_fetch_interval

    async def claim_round(self, limit: int) -> int:
        """Claim up to `limit` messages across the queues, starting from a rotating one."""
        self.claim_rounds += 1
        got = 0
        n = len(self.queues)
        start = self._rotation
        self._rotation = (self._rotation + 1) % n
        for i in range(n):
            queue = self.queues[(start + i) % n]
            remaining = limit - got
            if remaining <= 0:
                break
            if queue in self.paused:
                continue
            if self.breakers is not None:
                remaining = self.breakers.claim_limit(queue, remaining)
                if remaining <= 0:
                    continue

            channelled = queue in self.channelled
            ahead: ReadAhead | None = None

            async def claim(
                queue: str = queue, remaining: int = remaining, channelled: bool = channelled
            ) -> list[ClaimedMessage]:
                nonlocal ahead
                used, ahead = ahead, None  # a retry reads afresh
                return await self.claimer.claim(queue, remaining, channelled=channelled, ahead=used)

            give_back = False
            async with self.claiming:
                if self.health.is_down:
                    # known while this claim waited for the lock: nothing is claimed
                    # until the checks before resuming are done (see _run)
                    break
                ahead = self.reads_ahead.take(queue) if channelled else None
                # what to hand out: the claim, less any copy this process already runs
                claimed = self.on_claimed(await with_retries(self.driver, claim))
                if self.breakers is not None:
                    give_back = self.breakers.claimed(queue, claimed)
            if give_back:
                self.reads_ahead.given_back(queue)
            elif channelled and claimed:
                # before the hand-out: the read's task then runs, and sends its
                # statement, ahead of the workers it wakes, so the database reads while
                # they work; after it, the read went out only once they had all run
                self.reads_ahead.claimed(queue, self.options.max_workers * self.per_worker)
            self.buffer.put_all(claimed)
            if give_back:
                assert self.breakers is not None
                self.breakers.give_back(queue)
            got += len(claimed)
        return got
