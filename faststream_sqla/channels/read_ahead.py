"""A channel claim's read, made while the workers handle what the claim before took.

A channelled subscriber claims only for idle workers (no prefetch), so without this its
claims and its handlers take turns: the workers wait through the claim's read and its
write, and the database waits while they work. So once a claim has its messages, the
fetcher starts the next claim's read (`ReadsAhead`) and only then hands them to the
workers: the read's task runs first and sends its statement, and the database reads
while the workers run. When workers go idle, the claim plans from that read and only
writes.

The write's version check is what makes an older read safe: a claim or a change of
limits in any process moves the queue row's version, and the write then changes
nothing. Without such a move, a message can only have settled since the read, so a
plan from it may leave room unused but never exceeds a limit.

A read is not used, and the claim reads afresh, when it is older than
`READ_AHEAD_MAX_AGE` (a queue's pause or an opened breaker, which move no version, is
then seen at most that much later than without reading ahead), when its plan charges a rate
window (a rate is charged at the read's clock) or sends a breaker's probe, and when it
leaves nothing to claim (a publish since may have brought more). Reading ahead
happens only while the claims come at most half that age apart, so slow handlers
waste no reads, and at least READ_AHEAD_MIN_GAP apart: workers that go idle a few at
a time (a claim of a few messages right after another) leave no time to overlap,
and a read in a task of its own would only come later.

A read made ahead may read for two claims (`CLAIMS_PER_READ`): the first plans from the
channels it needs, and if its write moved the version, the channels the read found
after that claim's rotation serve the next claim with no read of its own (`leftover`),
brought up to date with what the write did, which is known exactly: the version and
rotation it stored, and its shares counted in flight. The next claim's write checks
that version as any other, so a claim from any process in between makes it claim
afresh. What the read found in flight can only have settled since. A queue's read
lists channels for two claims only while its last one found as many as it asked for:
a queue of few channels, or one long one, would pay for a longer read and be left
nothing.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from dataclasses import replace
from typing import TYPE_CHECKING

from .plan import EXTRA_CANDIDATES, PLAIN, Candidate, Plan, QueueRow, plan

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from faststream_sqla.drivers import Driver
    from faststream_sqla.drivers.channel_claim import ChannelSession
    from faststream_sqla.message import ClaimedMessage

#: the oldest read a claim still writes from (seconds); also how long an unused one
#: holds its connection
READ_AHEAD_MAX_AGE = 0.05
#: the least time between claims (seconds, a running average) for reading ahead to
#: pay: a read made ahead starts, and its result reaches the claim, a turn of the
#: event loop later than a read made by the claim itself, and a turn with busy
#: workers is a good part of this
READ_AHEAD_MIN_GAP = 0.001
#: claims a read made ahead reads for: those after the first plan from what it left
CLAIMS_PER_READ = 2
#: weight of the newest gap between claims in their running average
_GAP_WEIGHT = 0.2


def leftover(
    head: QueueRow, candidates: list[Candidate], planned: Plan, limit: int
) -> tuple[QueueRow, list[Candidate]] | None:
    """What a read leaves for the claim after the one that wrote `planned` from it
    (its write moved the version): the channels after that claim's rotation, with the
    queue row as that write left it; None if they would not fill a claim of `limit`
    without the channels from the start, or if the write charged rates or sent
    probes, which the read does not know the result of."""
    if planned.windows or planned.queue_window is not None or planned.probes:
        return None
    after = [c for c in candidates if c.after_rotation]
    names = [c.channel for c in after]
    if planned.rotation not in names:  # the claim went on to the channels from the start
        return None
    rest = after[names.index(planned.rotation) + 1 :]
    if len(rest) < limit + EXTRA_CANDIDATES:
        return None
    busy = dict(head.busy)
    in_flight = head.in_flight
    for member in planned.members:
        if member.share:
            channel = None if member.name == PLAIN else member.name
            busy[channel] = busy.get(channel, 0) + member.share
            in_flight += member.share
    written = replace(
        head,
        version=head.version + 1,
        rotation=planned.rotation,
        busy=busy,
        in_flight=in_flight,
    )
    return written, rest


class ReadAhead:
    """One queue's next claim read in a task of its own, its session held open for the
    write (`claim`), and closed unused once too old. `closing` collects the tasks that
    close expired ones in the background, for their owner to wait on."""

    def __init__(
        self,
        driver: Driver,
        engine: AsyncEngine,
        queue: str,
        limit: int,
        closing: set[asyncio.Task[None]] | None = None,
        *,
        left: tuple[QueueRow, list[Candidate], float] | None = None,
        claims: int = 1,
    ) -> None:
        if not driver.reads_channels_ahead:
            # its session would hold the database's one writer lock until the write
            msg = f"{driver.name} claims do not read ahead: their session holds the writer lock"
            raise ValueError(msg)
        self.queue, self.limit = queue, limit
        #: a read made for an earlier claim, left to this one (`leftover`), and when it
        #: was made: no read of its own
        self._inherited = left
        #: its read lists channels for this many claims
        self.claims = claims
        #: its read listed as many channels as it asked for (known once claimed): more
        #: may follow
        self.filled = False
        #: what this one's read leaves to the claim after it, once its write is made
        self.left: tuple[QueueRow, list[Candidate], float] | None = None
        self._stack = AsyncExitStack()
        self._started = time.monotonic() if left is None else left[2]
        #: its task has begun: the read is on its way to the database
        self.began = False
        #: claimed, discarded or expired: its session is someone's to close
        self._taken = False
        self._closing = set() if closing is None else closing
        self._task = asyncio.create_task(self._read(driver, engine))
        self._expiry = asyncio.get_running_loop().call_later(READ_AHEAD_MAX_AGE, self.expire)

    async def _read(
        self, driver: Driver, engine: AsyncEngine
    ) -> tuple[ChannelSession, QueueRow | None, list[Candidate]]:
        self.began = True
        try:
            session = await self._stack.enter_async_context(driver.channel_session(engine))
            if self._inherited is not None:
                inherited_head, candidates, _ = self._inherited
                return session, inherited_head, candidates
            head, candidates = await session.read(self.queue, self.limit * self.claims)
        except BaseException as exc:
            await self._stack.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return session, head, candidates

    @property
    def reads(self) -> bool:
        """It makes a read of its own (not one an earlier claim left)."""
        return self._inherited is None

    @property
    def age(self) -> float:
        return time.monotonic() - self._started

    async def read_made(self) -> None:
        """Wait until the read is made (or has failed)."""
        await asyncio.wait([self._task])

    async def claim(self, limit: int, *, channel_breakers: bool) -> list[ClaimedMessage] | None:
        """Up to `limit` messages claimed from this read; None if it may not be used
        (see the module) or its write found the version moved: claim afresh."""
        if self._taken:
            return None
        self._taken = True
        self._expiry.cancel()
        try:
            session, head, candidates = await self._task
        except Exception:
            return None  # closed as it failed; a fresh claim meets the error and reports it
        except BaseException:
            await self._close()  # cancelled while waiting for the read
            raise
        async with self._stack:  # the session ends with the write, or without one
            listed = sum(1 for c in candidates if c.after_rotation)
            self.filled = listed >= self.limit * self.claims + EXTRA_CANDIDATES
            if head is None or self.age > READ_AHEAD_MAX_AGE:
                return None
            planned = plan(
                head, candidates, min(limit, self.limit), channel_breakers=channel_breakers
            )
            if (
                planned is None
                or planned.shape == (0, False)
                or planned.windows
                or planned.queue_window is not None
                or planned.probes
            ):
                return None
            rows = await session.write(self.queue, head, planned)
            if rows is not None:
                left = leftover(head, candidates, planned, self.limit)
                if left is not None:
                    self.left = (*left, self._started)
            return rows

    def expire(self) -> None:
        """Close it unused, in the background (a task in `closing` until done)."""
        if not self._taken:
            self._taken = True
            closing = asyncio.create_task(self._close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    async def discard(self) -> None:
        """Close it unused, now."""
        self._expiry.cancel()
        if not self._taken:
            self._taken = True
            await self._close()

    async def _close(self) -> None:
        if not self._task.done():
            self._task.cancel()
        try:
            await self._task
        except BaseException:
            return  # its session was closed as it failed
        await self._stack.aclose()


class ReadsAhead:
    """A fetcher's reads ahead, one per channelled queue, and whether its claims come
    close enough together for reading ahead to pay."""

    def __init__(self, driver: Driver, engine: AsyncEngine) -> None:
        self.driver, self.engine = driver, engine
        self.pending: dict[str, ReadAhead] = {}
        #: reads closing unused in the background (the loop keeps only weak references)
        self._closing: set[asyncio.Task[None]] = set()
        #: running average of the time from a claim's end to the next one's start
        self._gap: float | None = None
        self._claimed_at: float | None = None
        #: per queue: the read ahead its claim in progress took
        self._used: dict[str, ReadAhead] = {}
        #: per queue: whether its next read lists channels for CLAIMS_PER_READ claims
        self._wide: dict[str, bool] = {}

    @property
    def enabled(self) -> bool:
        return self.driver.reads_channels_ahead

    def take(self, queue: str) -> ReadAhead | None:
        """The read made ahead for `queue`'s claim about to start, if any."""
        now = time.monotonic()
        if self._claimed_at is not None:
            gap = now - self._claimed_at
            self._gap = gap if self._gap is None else self._gap + _GAP_WEIGHT * (gap - self._gap)
            self._claimed_at = None
        ahead = self.pending.pop(queue, None)
        if ahead is not None:
            self._used[queue] = ahead
        return ahead

    def given_back(self, queue: str) -> None:
        """A claim of `queue` went back unstarted (its breaker opened while it ran):
        forget the read it used, and read nothing ahead for workers that will not run."""
        self._used.pop(queue, None)

    def claimed(self, queue: str, limit: int) -> None:
        """A claim of `queue` handed messages to the workers: read for the next one,
        of up to `limit`, if claims come close enough together (or leave it what the
        read this claim used left)."""
        used = self._used.pop(queue, None)
        self._claimed_at = time.monotonic()
        gap = self._gap
        if (
            not self.enabled
            or gap is None
            or not READ_AHEAD_MIN_GAP <= gap <= READ_AHEAD_MAX_AGE / 2
        ):
            return
        stale = self.pending.pop(queue, None)
        if stale is not None:
            stale.expire()
        left = None if used is None or used.limit != limit else used.left
        if used is not None and used.reads:
            self._wide[queue] = used.filled
        claims = CLAIMS_PER_READ if self._wide.get(queue, True) else 1
        self.pending[queue] = ReadAhead(
            self.driver, self.engine, queue, limit, self._closing, left=left, claims=claims
        )

    async def close(self) -> None:
        """Close every read not used, and wait for those closing in the background."""
        pending, self.pending = list(self.pending.values()), {}
        for ahead in pending:
            await ahead.discard()
        while self._closing:
            await asyncio.wait(set(self._closing))
