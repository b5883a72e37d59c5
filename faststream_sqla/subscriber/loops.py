"""The cooperating loops behind a subscriber: fetch, flush outcomes, release stuck.

Each loop survives database errors: it logs, backs off and tries again, so a lost
connection delays work but never stops it or loses a message.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from faststream_sqla import ordering
from faststream_sqla.admin import controls
from faststream_sqla.channels.claim import claim_channelled
from faststream_sqla.channels.read_ahead import ReadsAhead
from faststream_sqla.dialects.base import Outcome, reading, with_retries
from faststream_sqla.message import KEEP_STATE
from faststream_sqla.parser import claimed_from_row

from .claim_size import ClaimSizer

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from faststream_sqla.dialects import Dialect
    from faststream_sqla.health import DatabaseHealth
    from faststream_sqla.message import ClaimedMessage

    from .breaker import Breakers
    from .config import ConsumeOptions

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


#: outcome batches an `OutcomeFlusher` writes at once
FLUSH_CONCURRENCY = 2
#: deliveries a worker makes between yields to the event loop (SqlaSubscriber._work)
DELIVERIES_PER_YIELD = 8


def flush_batch_size(claim_size: int, options: ConsumeOptions) -> int:
    """Outcomes a flusher writes per statement: a claim's worth, and at least one per
    worker, so a batch fills as fast as the workers finish."""
    return max(claim_size, options.max_workers)


class PrefetchBuffer:
    """Claimed messages waiting for a worker: a deque, and an event for idle workers.

    Workers take from it once per message, so taking must cost next to nothing:
    `take()` is a plain popleft, and only a worker that finds it empty awaits.
    `None` items are stop sentinels.
    """

    def __init__(self) -> None:
        self.items: deque[ClaimedMessage | None] = deque()
        self._filled = asyncio.Event()
        #: items taken so far: the rate workers take them sizes the claims
        self.taken = 0
        #: workers waiting for an item, and an event set when one starts to: a fetcher
        #: that claims only for idle workers (channels) waits on it
        self.idle_workers = 0
        self.worker_idle = asyncio.Event()

    def __len__(self) -> int:
        return len(self.items)

    def put(self, item: ClaimedMessage | None) -> None:
        self.items.append(item)
        self._filled.set()

    def put_all(self, items: Iterable[ClaimedMessage]) -> None:
        self.items.extend(items)
        if self.items:
            self._filled.set()

    def take_where(self, wanted: Callable[[ClaimedMessage], bool]) -> list[ClaimedMessage]:
        """Take out every buffered message `wanted` says, keeping the others' order."""
        taken = [item for item in self.items if item is not None and wanted(item)]
        if taken:
            kept = [item for item in self.items if item is None or not wanted(item)]
            self.items.clear()
            self.items.extend(kept)
        return taken

    def take(self) -> ClaimedMessage | None:
        """The next item; raises IndexError when empty."""
        item = self.items.popleft()
        self.taken += 1
        return item

    def put_back(self, item: ClaimedMessage | None) -> None:
        """Return a taken item to the front."""
        self.items.appendleft(item)
        self.taken -= 1
        self._filled.set()

    async def get(self) -> ClaimedMessage | None:
        self.idle_workers += 1
        self.worker_idle.set()
        try:
            while not self.items:
                self._filled.clear()
                await self._filled.wait()
        finally:
            self.idle_workers -= 1
        self.taken += 1
        return self.items.popleft()


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
        dialect: Dialect,
        queues: Sequence[str],
        options: ConsumeOptions,
        buffer: PrefetchBuffer,
        wake: asyncio.Event,
        on_claimed: Callable[[Sequence[ClaimedMessage]], None],
        on_resized: Callable[[int], None],
        unsettled: Callable[[], int],
        claiming: asyncio.Lock,
        log: Log,
        health: DatabaseHealth,
        on_short_claim: Callable[[], None] | None = None,
    ) -> None:
        self.engine, self.dialect, self.queues = engine, dialect, list(queues)
        #: called when a channelled claim took less than its idle workers' room: the
        #: channels' slots may be held by handled messages whose outcomes wait to be
        #: written
        self.on_short_claim = on_short_claim
        self.options, self.buffer, self.wake, self.log = options, buffer, wake, log
        self.health = health
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
        self._hurry_claims = dialect.claim_round_trips > 1
        self.hurry_below = dialect.claim_round_trips * options.max_workers * DELIVERIES_PER_YIELD
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
        self.reads_ahead = ReadsAhead(dialect, engine)

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
            backoff.reset()
            if not self.channelled:
                self._resize()
            elif got < batch and self.on_short_claim is not None:
                self.on_short_claim()
            # with channels, a claim that took anything may have left limits with room
            full = got > 0 if self.channelled else got >= batch
            if full and self.options.min_fetch_interval <= 0:
                # More is likely waiting: claim again at once. Yielding first
                # (sleep(0)) cost a full turn of every busy worker, up to 8 deliveries
                # each, before the next claim was even sent; a claim yields to the
                # workers anyway while it waits for the database.
                continue
            await wait_event(
                self.wake,
                self.options.min_fetch_interval if full else self.options.max_fetch_interval,
            )

    async def claim_round(self, limit: int) -> int:
        """Claim up to `limit` messages across the queues, starting from a rotating one."""
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
            ahead = self.reads_ahead.take(queue) if channelled else None

            async def claim(
                queue: str = queue, remaining: int = remaining, channelled: bool = channelled
            ) -> list:
                nonlocal ahead
                if channelled:
                    breakers = self.breakers
                    used, ahead = ahead, None  # a retry reads afresh
                    return await claim_channelled(
                        self.dialect,
                        self.engine,
                        queue,
                        remaining,
                        channel_breakers=breakers is not None and breakers.per_channel,
                        ahead=used,
                    )
                return await self.dialect.claim(self.engine, queue, remaining)

            async with self.claiming:
                rows = await with_retries(self.dialect, claim)
                now = time.monotonic()
                claimed = [claimed_from_row(row, now) for row in rows]
                self.on_claimed(claimed)
                if self.breakers is not None:
                    self.breakers.claimed(queue, claimed)
            if channelled and rows:
                # before the hand-out: the read's task then runs, and sends its
                # statement, ahead of the workers it wakes, so the database reads while
                # they work; after it, the read went out only once they had all run
                self.reads_ahead.claimed(queue, self.options.max_workers * self.per_worker)
            self.buffer.put_all(claimed)
            got += len(rows)
        return got


class OutcomeFlusher(StoppableLoop):
    """Buffers outcomes and writes them in batches, one transaction per batch, with up
    to `concurrency` batches in flight.

    Each outcome is fenced by its own claim token, so batches are independent: while
    one transaction waits for its commit to reach disk, the next is already on its way.
    A batch whose write fails goes back to the front of the queue; nothing is dropped.
    """

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        dialect: Dialect,
        interval: float,
        batch_size: int,
        on_written: Callable[[Sequence[Outcome]], None],
        log: Log,
        health: DatabaseHealth,
        concurrency: int = FLUSH_CONCURRENCY,
        after_write: Callable[[Sequence[Outcome]], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__()
        self.engine, self.dialect, self.interval, self.log = engine, dialect, interval, log
        self.health = health
        self.batch_size = max(batch_size, 1)
        self.on_written = on_written
        #: follow-up work once a batch is committed (releasing ordering keys), before
        #: on_written; its failure is logged, never undoes the written batch
        self.after_write = after_write
        self.pending: list[Outcome] = []
        self.in_flight: set[asyncio.Task[bool]] = set()
        self._writers = asyncio.Semaphore(concurrency)
        self._full = asyncio.Event()
        self._nonempty = asyncio.Event()
        self._backoff = Backoff()
        self._failed = False
        self.written = 0

    def add(self, outcome: Outcome) -> None:
        pending = self.pending
        pending.append(outcome)
        if len(pending) == 1:
            self._nonempty.set()
        if len(pending) >= self.batch_size:
            self._full.set()

    def write_soon(self) -> None:
        """Write what is pending without gathering for flush_interval: another message
        waits for one of these outcomes (the next of its ordering key)."""
        if self.pending:
            self._full.set()

    def add_all(self, outcomes: Iterable[Outcome]) -> None:
        self.pending.extend(outcomes)
        if self.pending:
            self._nonempty.set()
        if len(self.pending) >= self.batch_size:
            self._full.set()

    def request_stop(self) -> None:
        super().request_stop()
        # wake the loop wherever it waits, idle or gathering, so it sees the request
        self._nonempty.set()
        self._full.set()

    async def run(self) -> None:
        while not self.stopping.is_set():
            # After a failed write, back off before trying again; in an outage, until
            # the database answers.
            if self._failed and self.health.is_down:
                await self.health.until_reachable(self.stopping)
                if self.stopping.is_set():
                    return  # the final flush writes what is left
            elif self._failed and await self.pause(self._backoff.next_delay()):
                return
            # Idle until there is something to write (no busy loop at flush_interval=0),
            # then gather more for up to flush_interval unless a batch fills first.
            await self._nonempty.wait()
            if self.stopping.is_set():
                return  # the final flush writes what is left
            await wait_event(self._full, self.interval)
            self._full.clear()
            await self._writers.acquire()
            batch = self._take()
            if self.stopping.is_set() or not batch:
                self.pending[:0] = batch
                self._writers.release()
                continue
            task = asyncio.create_task(self._write_then_release(batch))
            self.in_flight.add(task)
            task.add_done_callback(self.in_flight.discard)

    def _take(self) -> list[Outcome]:
        batch = self.pending[: self.batch_size]
        del self.pending[: len(batch)]
        if not self.pending:
            self._nonempty.clear()
        elif len(self.pending) >= self.batch_size:
            self._full.set()  # another whole batch is waiting: no need to gather
        return batch

    async def _write_then_release(self, batch: list[Outcome]) -> bool:
        try:
            return await self._write(batch)
        finally:
            self._writers.release()

    async def _write(self, batch: list[Outcome]) -> bool:
        """Write one batch; on failure it is put back, first in line, and False returned."""

        tries = 0

        saving = [o for o in batch if o.saved_state is not KEEP_STATE]

        async def write() -> int:
            nonlocal tries
            tries += 1
            if saving:  # deferrals' states first: a crash between leaves state, no outcome
                await self.dialect.save_states(self.engine, saving)
            return await self.dialect.write_outcomes(self.engine, batch)

        try:
            changed = await with_retries(self.dialect, write)
        except BaseException as exc:
            self.pending[:0] = batch
            self._nonempty.set()
            if not isinstance(exc, Exception):
                raise  # cancelled: kept for the final flush
            self._failed = True
            log_failure(self.log, f"writing {len(batch)} outcomes", exc, self._backoff, self.health)
            return False
        self._failed = False
        self._backoff.reset()
        self.written += len(batch)
        if self.after_write is not None:
            try:
                await self.after_write(batch)
            except Exception as exc:
                self.log(logging.WARNING, f"after writing {len(batch)} outcomes: {exc!r}")
        self.on_written(batch)
        if changed < len(batch):
            # Fenced: the row is no longer PROCESSING under this claim. Either its claim
            # was released (and maybe re-claimed), or an earlier try of this very write
            # committed before its connection was lost, and this one found it done.
            stale = len(batch) - changed
            if tries > 1:
                self.log(
                    logging.WARNING,
                    f"{stale} of {len(batch)} outcomes changed nothing when written again "
                    "after a lost connection: most likely the first write committed before "
                    "the connection was lost; any whose claim was released meanwhile will "
                    "be delivered again",
                )
            else:
                self.log(
                    logging.WARNING,
                    f"{stale} outcomes were stale: their claims had been released by "
                    "release-stuck (this process's leases lapsed); those messages will be "
                    "delivered again",
                )
        return True

    async def flush(self) -> bool:
        """Write everything pending, once the writes in flight are done; False (outcomes
        kept) if the database failed."""
        if self.in_flight:
            await asyncio.wait(set(self.in_flight))
        while self.pending:
            if not await self._write(self._take()):
                return False
        return True


class StuckReleaser(StoppableLoop):
    """Puts this subscriber's queues' long-PROCESSING messages back to PENDING: those
    of processes that died or lost the database, never this process's own."""

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        dialect: Dialect,
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
        self.engine, self.dialect, self.queues = engine, dialect, list(queues)
        self.options, self.held, self.on_released, self.log = options, held, on_released, log
        self.claiming = claiming
        #: per queue, the ordering key after which the next sweep looks
        self._sweep_from: dict[str, str] = {}

    async def release_once(self) -> int:
        async def release() -> int:
            # What this process holds is never stuck, however late its renewal: a
            # handler that blocks the event loop holds back the LeaseKeeper too, and
            # without this the process took back its own running messages.
            return await self.dialect.release_stuck(
                self.engine, self.queues, self.options.release_stuck_timeout, list(self.held)
            )

        # No claim of this process runs meanwhile: a message it claimed after the held
        # ids were read, while a blocking handler delayed the statement past the
        # timeout, would otherwise look stuck.
        async with self.claiming:
            count = await with_retries(self.dialect, release)
        for queue in self.queues:
            # messages left WAITING for an ordering key by a process that died between
            # a commit and its release (faststream_sqla.ordering)
            released, self._sweep_from[queue] = await with_retries(
                self.dialect,
                functools.partial(
                    ordering.sweep,
                    self.dialect,
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
        dialect: Dialect,
        queues: Sequence[str],
        fetcher: Fetcher,
        wake: asyncio.Event,
        log: Log,
        health: DatabaseHealth,
        interval: float = CONTROL_INTERVAL,
        breakers: Breakers | None = None,
    ) -> None:
        super().__init__()
        self.engine, self.dialect, self.queues = engine, dialect, list(queues)
        self.fetcher, self.wake, self.log, self.health = fetcher, wake, log, health
        self.interval = interval
        self.breakers = breakers

    async def read_once(self) -> None:
        await self._read_channelled()
        if self.breakers is not None:
            await self._read_with_breakers(self.breakers)
            return

        async def read() -> set[str]:
            async with reading(self.engine) as conn:
                return await controls.paused_among(conn, self.dialect.tables, self.queues)

        self._take_paused(frozenset(await with_retries(self.dialect, read)))

    async def _read_channelled(self) -> None:
        async def read() -> set[str]:
            async with reading(self.engine) as conn:
                return await controls.channelled_among(conn, self.dialect.tables, self.queues)

        channelled = frozenset(await with_retries(self.dialect, read))
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

    async def _read_with_breakers(self, breakers: Breakers) -> None:
        versions = breakers.versions()

        async def read() -> dict[str, controls.ControlReading]:
            async with reading(self.engine) as conn:
                return await controls.controls_among(
                    conn, self.dialect.tables, self.queues, breakers.silent_after
                )

        readings = await with_retries(self.dialect, read)
        self._take_paused(frozenset(q for q, found in readings.items() if found.paused))
        await breakers.observe(readings, versions)

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
        dialect: Dialect,
        held: dict[int, ClaimedMessage],
        interval: float,
        log: Log,
        health: DatabaseHealth,
    ) -> None:
        super().__init__()
        self.engine, self.dialect, self.held, self.log = engine, dialect, held, log
        self.health = health
        self.interval = interval

    async def renew_once(self) -> int:
        leases = [(raw.id, raw.token) for raw in list(self.held.values())]
        if not leases:
            return 0

        async def renew() -> int:
            return await self.dialect.extend_leases(self.engine, leases)

        return await with_retries(self.dialect, renew)

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
