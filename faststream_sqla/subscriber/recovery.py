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
failover sits in this process's prefetch buffer while the new primary shows it PENDING,
and another process claims it there. So before work resumes (`DatabaseHealth.
before_resuming`) the rows of the held messages are read once: a buffered message
whose row shows no claim, or another claim, goes back unhandled (its release is fenced
and changes nothing), and the queue delivers it again. A row still PROCESSING under
the same token may be this claim or a later one that counted to the same token after
the loss; it is kept, as is a message whose row is gone: this copy may be its last.
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
    """When the broker's outage ends, releases the written claims the database still
    shows PROCESSING (see the module's docstring); skips what this process holds."""

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        driver: Driver,
        written: WrittenClaims,
        held: dict[int, ClaimedMessage],
        on_released: Callable[[], None],
        give_back: Callable[[Callable[[ClaimedMessage], bool]], int],
        log: Log,
        health: DatabaseHealth,
    ) -> None:
        super().__init__()
        self.engine, self.driver, self.written, self.held = engine, driver, written, held
        self.on_released, self.log, self.health = on_released, log, health
        #: takes the buffered messages a predicate picks and releases them unstarted
        self.give_back = give_back
        self.recovered = asyncio.Event()
        #: messages released so far, buffered messages given back for lost claims, and
        #: releases run (read by tests)
        self.released = 0
        self.given_back = 0
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

    async def give_back_lost_claims(self) -> int:
        """Before work resumes: give back the buffered messages whose rows show no claim
        or another one (see the module's docstring). One read for every held message."""
        held = list(self.held.values())
        if not held:
            return 0

        async def read() -> dict[int, StoredClaim]:
            return await self.driver.stored_claims(self.engine, [raw.id for raw in held])

        stored = await with_retries(self.driver, read)
        lost = {
            raw.id
            for raw in held
            if (claim := stored.get(raw.id)) is not None
            and (claim.token != raw.token or not claim.processing)
        }
        count = self.give_back(lambda raw: raw.id in lost) if lost else 0
        if count:
            self.given_back += count
            self.log(
                logging.WARNING,
                f"gave back {count} prefetched messages unhandled: the database no longer "
                "shows this process's claims on them (a failover to a standby the claims "
                "had not reached); the queue delivers them again",
            )
        return count

    async def run(self) -> None:
        forget_check = self.health.before_resuming(self.give_back_lost_claims)
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
