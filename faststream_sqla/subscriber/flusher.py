"""The outcome flusher: handled messages' outcomes, written in batches."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from faststream_sqla.drivers.base import Outcome, with_retries
from faststream_sqla.message import KEEP_STATE

from .loops import Backoff, Log, StoppableLoop, log_failure, wait_event

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from faststream_sqla.drivers import Driver
    from faststream_sqla.health import DatabaseHealth

    from .config import ConsumeOptions

#: outcome batches an `OutcomeFlusher` writes at once
FLUSH_CONCURRENCY = 2


def flush_batch_size(claim_size: int, options: ConsumeOptions) -> int:
    """Outcomes a flusher writes per statement: a claim's worth, and at least one per
    worker, so a batch fills as fast as the workers finish."""
    return max(claim_size, options.max_workers)


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
        driver: Driver,
        interval: float,
        batch_size: int,
        on_written: Callable[[Sequence[Outcome]], None],
        log: Log,
        health: DatabaseHealth,
        concurrency: int = FLUSH_CONCURRENCY,
        after_write: Callable[[Sequence[Outcome]], Awaitable[None]] | None = None,
        claimed_since: Callable[[Sequence[Outcome]], float | None] = lambda _outcomes: None,
    ) -> None:
        super().__init__()
        self.engine, self.driver, self.interval, self.log = engine, driver, interval, log
        self.health = health
        self.batch_size = max(batch_size, 1)
        self.on_written = on_written
        #: follow-up work once a batch is committed (releasing ordering keys), before
        #: on_written; its failure is logged, never undoes the written batch
        self.after_write = after_write
        #: when the earliest claim of a batch was made (time.monotonic()), while held
        self.claimed_since = claimed_since
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
                await self.driver.save_states(self.engine, saving)
            return await self.driver.write_outcomes(self.engine, batch)

        try:
            changed = await with_retries(self.driver, write)
        except BaseException as exc:
            self._nonempty.set()
            if not isinstance(exc, Exception):
                self.pending[:0] = batch
                raise  # cancelled: kept for the final flush
            self._failed = True
            log_failure(self.log, f"writing {len(batch)} outcomes", exc, self._backoff, self.health)
            self.pending[:0] = self._one_outcome_per_claim(batch)
            return False
        self._failed = False
        self._backoff.reset()
        self.written += len(batch)
        claimed = self.claimed_since(batch) if changed < len(batch) else None
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
            elif self.health.outages and self.health.outage_since(claimed or 0.0):
                # No lease of a live process lapses in a short outage: the claims were
                # lost with the database's state (a failover, a restart).
                self.log(
                    logging.WARNING,
                    f"{stale} outcomes were stale: the database was unreachable since "
                    "those messages were claimed, and it no longer shows their claims; "
                    "most likely the claims were lost in a failover to a standby or a "
                    "restart (written, but not yet replicated or flushed), else "
                    "release-stuck released them meanwhile; those messages will be "
                    "delivered again",
                )
            else:
                self.log(
                    logging.WARNING,
                    f"{stale} outcomes were stale: their claims had been released by "
                    "release-stuck (this process's leases lapsed); those messages will be "
                    "delivered again",
                )
        return True

    def _one_outcome_per_claim(self, batch: list[Outcome]) -> list[Outcome]:
        """A batch whose write failed, without second outcomes of one claim. Two runs of
        one message under one token (a claim lost in a failover counts to the same token
        again) would archive the row twice, and the batch would fail on every try; the
        first outcome is kept, and the second would have been fenced out anyway."""
        first: dict[tuple[int, int], Outcome] = {}
        for outcome in batch:
            first.setdefault((outcome.id, outcome.token), outcome)
        if len(first) == len(batch):
            return batch
        self.log(
            logging.WARNING,
            f"{len(batch) - len(first)} outcomes dropped: another outcome of the same "
            "claim of their messages was in the batch (a message run twice)",
        )
        return list(first.values())

    async def flush(self) -> bool:
        """Write everything pending, once the writes in flight are done; False (outcomes
        kept) if the database failed."""
        if self.in_flight:
            await asyncio.wait(set(self.in_flight))
        while self.pending:
            if not await self._write(self._take()):
                return False
        return True
