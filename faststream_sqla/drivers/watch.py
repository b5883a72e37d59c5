"""The wake-up source of the databases that cannot notify (MariaDB, SQLite).

One watcher per broker process looks for messages newer than the newest it has seen,
and wakes this process's fetchers of their queues. A look is one statement over the
message table's primary key, `id > :after`: while nothing is new it ends after one
descent of that index, however long the queues are; when something is new it reads
only the new rows, whose queue and state say which fetchers to wake (none for a message
already claimed, by a fetcher of the publishing process, say). Publishers write
nothing for it.

Looks follow each other quickly while messages arrive and slow down while none do
(`Pace`).

New ids do not show every message that becomes claimable: a delay ends, a retry comes
due, a lease is released, a dead letter is redriven. So every `max_fetch_interval` (the
shortest of this process's subscribers) the watcher also asks which of the process's
queues hold a message the plain claim could take now (`queues_with_due_messages`, one
statement for every queue), and wakes their fetchers. While it does, the fetchers of
plain queues need not poll for themselves, and wait ten times longer between polls
(wakeup.COVERED_POLL_FACTOR): one statement per process, not a claim per subscriber,
is what an idle process costs the server. When the watcher is down they poll at their
own interval again; channelled queues always do.

Ids are handed out when a row is inserted, not when its transaction commits: on
MariaDB a transaction that commits after a later one's shows its rows below the newest
id already seen. Where that can happen (`late_commits`), the ids a look found missing
below the newest stay looked for, by key, for `LATE_COMMIT_PATIENCE` (`Seen`). SQLite
has one writer at a time, whose ids commit in order.

Each database's package holds its watcher (`sqlite/watcher.py`, `mysql/watcher.py`),
with its connection and its statements; this module holds what they share.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .base import NotificationListener, WakeupHooks

#: a look's row: the message id, its queue, and whether it may still be claimed
Row = tuple[int, str, Any]

#: most new rows one look reads (a look that reads this many looks again at once); a
#: burst of publishes beyond it is read over several looks
ROWS_PER_LOOK = 1000
#: seconds an id missing below the newest is looked for: a publish whose transaction
#: commits later than this after a later one's is found by polling
LATE_COMMIT_PATIENCE = 5.0
#: most missing ids looked for at once (the newest are kept): one key lookup each, in
#: the look's statement
MOST_MISSING = 64
#: most queues one look for due messages asks about (one statement part each, a dozen
#: bound values): a process with more makes several
DUE_QUEUES_PER_LOOK = 100
#: seconds before the first reconnect, doubled after each failure up to the longest
RECONNECT_FIRST = 0.1
RECONNECT_LONGEST = 5.0


@dataclass(frozen=True)
class Pace:
    """How long a watcher waits between looks: `shortest` while messages arrive and
    for `hold` seconds after the last, then twice as long after each look that woke
    nobody, up to `longest`. A new message brings it back to `shortest` at once."""

    shortest: float
    longest: float
    hold: float

    def after(self, previous: float, quiet_for: float) -> float:
        """The wait before the next look, given the last wait and the seconds since a
        look last woke a fetcher."""
        if quiet_for < self.hold:
            return self.shortest
        return min(self.longest, max(self.shortest, previous * 2))


class Seen:
    """The newest message id a watcher has seen and, where commits can land out of id
    order (`late_commits`), the ids below it that no look has found yet."""

    def __init__(self, newest: int, *, late_commits: bool) -> None:
        self.newest = newest
        self.late_commits = late_commits
        #: missing id -> the loop time until which it is looked for, oldest noted first
        self._missing: dict[int, float] = {}

    @property
    def missing(self) -> list[int]:
        """The ids a look should also read, by key."""
        return list(self._missing)

    def take(self, rows: Sequence[Row], now: float) -> list[str]:
        """The queues of `rows` (what a look found: new rows, and missing ones that
        turned up) that hold a message still to be claimed, each once, in id order.
        Moves `newest` up and notes the ids skipped below it."""
        queues: dict[str, None] = {}
        found: set[int] = set()
        for message_id, queue, ready in rows:
            if message_id > self.newest:
                found.add(message_id)
            else:
                self._missing.pop(message_id, None)
            if ready:
                queues[queue] = None
        if found:
            top = max(found)
            if self.late_commits:
                self._note_missing(top, found, now)
            self.newest = top
        self.expire(now)
        return list(queues)

    def expire(self, now: float) -> None:
        """Stop looking for the ids noted longer than LATE_COMMIT_PATIENCE ago."""
        if self._missing:
            for message_id in [i for i, until in self._missing.items() if until < now]:
                del self._missing[message_id]

    def _note_missing(self, top: int, found: set[int], now: float) -> None:
        # The ids between the last newest and `top` that the look did not return: a
        # message settled before the look (most of them), a rolled-back insert, or one
        # whose transaction has not committed yet. Counted down from the top, so the
        # walk is bounded by the rows found plus MOST_MISSING, whatever the range.
        until = now + LATE_COMMIT_PATIENCE
        noted: list[int] = []
        candidate = top - 1
        while candidate > self.newest and len(noted) < MOST_MISSING:
            if candidate not in found:
                noted.append(candidate)
            candidate -= 1
        for message_id in reversed(noted):
            self._missing[message_id] = until
        if len(self._missing) > MOST_MISSING:
            for message_id in sorted(self._missing)[: len(self._missing) - MOST_MISSING]:
                del self._missing[message_id]


class MessageWatcher(NotificationListener):
    """Looks for new messages on a connection of its own and wakes the fetchers of
    their queues; reconnects with backoff after a failure, says so once per outage,
    and wakes every queue each time it (re)connects, since publishes meanwhile went
    unheard. Each database's subclass opens the connection and makes the look."""

    #: the waits between looks
    pace: Pace
    #: whether ids can commit out of order (see Seen), set by the subclass
    late_commits = False
    #: what the log calls it
    title = "wake-up watcher"

    def __init__(self, hooks: WakeupHooks) -> None:
        self.on_queue, self.on_reconnect = hooks.on_queue, hooks.on_reconnect
        self.consumes, self.log, self.noticed = hooks.consumes, hooks.log, hooks.noticed
        self.due_checks, self.covering = hooks.due_checks, hooks.covering
        #: how many times it has connected
        self.connects = 0
        #: looks made since start
        self.looks = 0
        #: looks for due messages made since start
        self.due_looks = 0
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> None:
        self._stopping = False
        self._task = asyncio.create_task(self._run(), name=f"faststream-sqla:{self.title}")

    async def stop(self) -> None:
        # the flag too: a cancellation some await swallows must not leave stop() waiting
        # on a watcher that goes on looking
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def wait_connects(self, count: int) -> None:
        """Wait until the watcher has connected `count` times in all."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.connects >= count)

    async def wait_due_looks(self, count: int) -> None:
        """Wait until the watcher has looked for due messages `count` times in all."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.due_looks >= count)

    # -- what each database provides --------------------------------------------------
    @abc.abstractmethod
    async def _open(self) -> int:
        """Open the watcher's connection; the newest message id at that moment."""

    @abc.abstractmethod
    async def _look(self, seen: Seen) -> Sequence[Row] | None:
        """The rows newer than `seen.newest` (at most ROWS_PER_LOOK, oldest first) and
        those of `seen.missing` now there; None when the database says nothing
        changed since the last look."""

    @abc.abstractmethod
    async def _due(self, queues: tuple[str, ...]) -> list[str] | None:
        """Which of `queues` hold a message the plain claim could take now; None when
        the database could not say this time (a look to make again soon)."""

    @abc.abstractmethod
    def _close(self) -> None:
        """Close the watcher's connection, if open, without waiting on the database."""

    async def _due_among(self, queues: tuple[str, ...]) -> list[str] | None:
        found: list[str] = []
        for start in range(0, len(queues), DUE_QUEUES_PER_LOOK):
            due = await self._due(queues[start : start + DUE_QUEUES_PER_LOOK])
            if due is None:
                return None
            found += due
        return found

    # -- the loop ---------------------------------------------------------------------
    async def _run(self) -> None:
        delay = RECONNECT_FIRST
        told = False  # a line was logged: no more until the watcher works again
        while not self._stopping:
            try:
                try:
                    seen = Seen(await self._open(), late_commits=self.late_commits)
                except Exception as exc:
                    # a database that cannot be reached is the health check's to log
                    if not told and not self.noticed(exc):
                        self.log(logging.WARNING, f"{self.title} cannot connect: {exc!r}")
                    told = True
                else:
                    self.on_reconnect()
                    async with self._changed:
                        self.connects += 1
                        self._changed.notify_all()
                    delay, told = RECONNECT_FIRST, False
                    try:
                        await self._watch(seen)
                    except Exception as exc:
                        self.log(
                            logging.WARNING,
                            f"{self.title} stopped ({exc!r}); subscribers poll until it is back",
                        )
                        told = True
            finally:
                self.covering(False)
                self._close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_LONGEST)

    async def _watch(self, seen: Seen) -> None:
        loop = asyncio.get_running_loop()
        pace = self.pace
        # every queue was just woken (on_reconnect): no hurry until a look finds a message
        wait = pace.shortest
        woke_at = loop.time() - pace.hold
        due_at = loop.time()  # the first look for due messages comes at once
        while not self._stopping:
            queues, every = self.due_checks()
            await asyncio.sleep(min(wait, max(0.0, due_at - loop.time())) if queues else wait)
            rows = await self._look(seen)
            self.looks += 1
            now = loop.time()
            if rows:
                for queue in seen.take(rows, now):
                    if self.consumes(queue):
                        self.on_queue(queue)
                        woke_at = now
                if len(rows) >= ROWS_PER_LOOK:  # more may wait behind them
                    woke_at = now
            else:
                seen.expire(now)
            if queues and now >= due_at:
                due = await self._due_among(queues)
                if due is not None:
                    async with self._changed:
                        self.due_looks += 1
                        self._changed.notify_all()
                    due_at = now + every
                    # not a reason to look faster: a message held back by its key or a
                    # breaker is due on every look until it is taken
                    for queue in due:
                        if self.consumes(queue):
                            self.on_queue(queue)
                    self.covering(True)
            wait = pace.after(wait, now - woke_at)
