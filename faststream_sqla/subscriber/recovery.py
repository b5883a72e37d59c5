"""After an outage: release at once the claims this process settled but the database
may have forgotten settling.

A failover to an asynchronous standby loses the writes the standby had not received.
An outcome written just before it may be among them while its claim was not: the new
primary then shows the message PROCESSING under a claim no process holds, and without
this it waits out `release_stuck_timeout` before anyone delivers it again. This process
knows those claims: it wrote their outcomes. Each written claim is remembered (id and
token) for as long as its lease would have run; when an outage ends, those the
database still shows PROCESSING under that very token are put back to PENDING. The
token (`claims_count`) fences the release: a message claimed again since, by any
process, has another token and is left alone, and a claim this process still holds
is never among the written ones.

The claims themselves can be lost the same way: a message claimed just before the
failover sits in this process's prefetch buffer while the new primary shows it PENDING
again, under the token before this claim's. So before work resumes (`DatabaseHealth.
before_resuming`; the fetchers claim nothing meanwhile) the rows of the buffered
messages are read once, and a message whose row shows no claim, or another claim, is
dropped from this process unhandled: the queue delivers it again. Nothing is written
for it: a release fenced by this claim's token would match the next claim of that
row, which counts to the same token. A row still PROCESSING under the same token may
be this claim or such a later one; it is kept, as is a message whose row is gone: this
copy may be its last. A stop during the check gives the buffer back as any stop does,
with fenced releases.
"""

from __future__ import annotations

import asyncio
import logging
import time
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from faststream_sqla.drivers.base import Outcome, StoredClaim, with_retries

from .loops import Backoff, Log, StoppableLoop, log_failure

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from faststream_sqla.drivers import Driver
    from faststream_sqla.health import DatabaseHealth
    from faststream_sqla.message import ClaimedMessage

    from .buffer import PrefetchBuffer

#: the most written claims remembered: older ones are left to release-stuck
MAX_REMEMBERED = 100_000


class WrittenClaims:
    """The (id, token) of the outcomes this process wrote in the last `keep_for`
    seconds (at most `limit` of them), kept as compact arrays per written batch."""

    def __init__(self, keep_for: float, limit: int = MAX_REMEMBERED) -> None:
        self.keep_for, self.limit = keep_for, limit
        self._batches: deque[tuple[float, array[int], array[int]]] = deque()
        self._count = 0

    def note(self, outcomes: Sequence[Outcome]) -> None:
        if not outcomes:
            return
        now = time.monotonic()
        ids = array("q", [o.id for o in outcomes])
        tokens = array("q", [o.token for o in outcomes])
        self._batches.append((now, ids, tokens))
        self._count += len(ids)
        batches = self._batches
        while batches and (batches[0][0] < now - self.keep_for or self._count > self.limit):
            self._count -= len(batches.popleft()[1])

    def recent(self) -> list[tuple[int, int]]:
        """Every remembered claim, oldest first, each once."""
        cutoff = time.monotonic() - self.keep_for
        seen: dict[tuple[int, int], None] = {}
        for written, ids, tokens in self._batches:
            if written >= cutoff:
                seen.update(dict.fromkeys(zip(ids, tokens, strict=True)))
        return list(seen)

    def __len__(self) -> int:
        return self._count


class ClaimRecovery(StoppableLoop):
    """When the broker's outage ends: before work resumes, drops the buffered messages
    whose claims the database lost; then releases the written claims the database still
    shows PROCESSING, skipping what this process holds (see the module's docstring)."""

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        driver: Driver,
        written: WrittenClaims,
        held: dict[int, ClaimedMessage],
        on_released: Callable[[], None],
        buffer: PrefetchBuffer,
        let_go: Callable[[Sequence[ClaimedMessage]], None],
        log: Log,
        health: DatabaseHealth,
    ) -> None:
        super().__init__()
        self.engine, self.driver, self.written, self.held = engine, driver, written, held
        self.on_released, self.log, self.health = on_released, log, health
        #: the prefetch buffer, and what lets go of messages taken out of it unhandled
        self.buffer, self.let_go = buffer, let_go
        self.recovered = asyncio.Event()
        #: messages released so far, buffered messages dropped for lost claims, and
        #: releases run (read by tests)
        self.released = 0
        self.dropped = 0
        self.rounds = 0
        self.ran = asyncio.Event()

    async def release_once(self) -> int:
        held = self.held
        claims = [claim for claim in self.written.recent() if claim[0] not in held]
        if not claims:
            return 0

        async def release() -> int:
            return await self.driver.release_claims(self.engine, claims)

        count = await with_retries(self.driver, release)
        if count:
            self.released += count
            self.log(
                logging.WARNING,
                f"released {count} messages still PROCESSING under claims whose outcomes "
                "this process had written before the outage: those writes were lost (a "
                "failover to a standby they had not reached); they will be delivered again",
            )
            self.on_released()
        return count

    async def drop_lost_claims(self) -> int:
        """Before work resumes: drop the buffered messages whose rows show no claim or
        another one (see the module's docstring). One read for all of them."""
        buffered = self.buffer.messages()
        if not buffered:
            return 0

        async def read() -> dict[int, StoredClaim]:
            return await self.driver.stored_claims(self.engine, [raw.id for raw in buffered])

        stored = await with_retries(self.driver, read)
        lost = {
            id(raw)  # this very object: another claim of the row may be buffered too
            for raw in buffered
            if (claim := stored.get(raw.id)) is not None
            and (claim.token != raw.token or not claim.processing)
        }
        if not lost:
            return 0
        dropped = self.buffer.take_where(lambda raw: id(raw) in lost)
        self.let_go(dropped)
        if dropped:
            self.dropped += len(dropped)
            self.log(
                logging.WARNING,
                f"dropped {len(dropped)} prefetched messages unhandled: the database no "
                "longer shows this process's claims on them (a failover to a standby the "
                "claims had not reached); the queue delivers them again",
            )
        return len(dropped)

    async def run(self) -> None:
        forget_check = self.health.before_resuming(self.drop_lost_claims)
        forget = self.health.on_recovery(self.recovered.set)
        backoff = Backoff()
        try:
            while not self.stopping.is_set():
                await self.recovered.wait()
                if self.stopping.is_set():
                    return
                self.recovered.clear()
                try:
                    await self.release_once()
                except Exception as exc:
                    log_failure(
                        self.log, "releasing claims after an outage", exc, backoff, self.health
                    )
                    self.recovered.set()  # try again after the pause
                    if await self.pause(backoff.next_delay()):
                        return
                    continue
                backoff.reset()
                self.rounds += 1
                self.ran.set()
        finally:
            forget()
            forget_check()

    def request_stop(self) -> None:
        super().request_stop()
        self.recovered.set()
