"""In-process wake-ups: a publish wakes the fetch loops of local subscribers at once.

The hub also knows whether a wake-up watcher of this process (MariaDB, SQLite:
drivers/watch.py) checks for due messages in the subscribers' place (`covered`): while
it does, an idle fetcher of plain queues polls only every COVERED_POLL_FACTOR times its
`max_fetch_interval`, and the watcher's one statement per process finds what those
polls would have found (a delay ended, a retry due, a lease released)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Connection, RootTransaction

#: how long a commit is waited for before its wake-up is given up (polling covers it)
COMMIT_WAIT_LIMIT = 60.0
#: while a watcher checks for due messages, an idle fetcher still polls this many times
#: less often: a safety net, not the way messages are found
COVERED_POLL_FACTOR = 10


class WakeupHub:
    """Maps queue names to the events of the fetch loops that consume them."""

    def __init__(self) -> None:
        self._events: defaultdict[str, set[asyncio.Event]] = defaultdict(set)
        self._after_commit: set[asyncio.Task[None]] = set()
        #: the idle fetchers a watcher may check due messages for: event -> (queues,
        #: their max_fetch_interval)
        self._polling: dict[asyncio.Event, tuple[tuple[str, ...], float]] = {}
        #: due_checks' answer, worked out when a fetcher comes or goes, not on each look
        self._due: tuple[tuple[str, ...], float] = ((), 0.0)
        #: True while a watcher checks for due messages (set_covered)
        self.covered = False

    def register(
        self,
        queues: Iterable[str],
        event: asyncio.Event,
        *,
        max_fetch_interval: float | None = None,
    ) -> None:
        """Wake `event` for publishes to `queues`; with `max_fetch_interval`, it is an
        idle fetcher's, whose polls a watcher may take over (`due_checks`)."""
        queues = tuple(queues)
        for queue in queues:
            self._events[queue].add(event)
        if max_fetch_interval is not None:
            self._polling[event] = (queues, max_fetch_interval)
            self._due = self._due_of_polling()

    def unregister(self, queues: Iterable[str], event: asyncio.Event) -> None:
        for queue in queues:
            self._events[queue].discard(event)
        if self._polling.pop(event, None) is not None:
            self._due = self._due_of_polling()

    def due_checks(self) -> tuple[tuple[str, ...], float]:
        """The queues whose due messages a watcher should look for, and how often: the
        shortest `max_fetch_interval` of their fetchers. No queues when there are none.
        Asked before every look, so kept ready."""
        return self._due

    def _due_of_polling(self) -> tuple[tuple[str, ...], float]:
        if not self._polling:
            return (), 0.0
        queues = sorted({q for found, _ in self._polling.values() for q in found})
        return tuple(queues), min(interval for _, interval in self._polling.values())

    def set_covered(self, covered: bool) -> None:
        """A watcher started or stopped checking for due messages. When it stops, every
        fetcher is woken, to poll at its own interval again."""
        if covered == self.covered:
            return
        self.covered = covered
        if not covered:
            for event in self._polling:
                event.set()

    def consumes(self, queue: str) -> bool:
        """Whether a fetch loop of this broker waits on `queue` (a wake-up source then
        has someone to wake)."""
        return bool(self._events.get(queue))

    def wake(self, queues: Iterable[str]) -> None:
        for queue in queues:
            for event in self._events.get(queue, ()):
                event.set()

    def wake_after_commit(
        self,
        connection: Connection,
        queues: Iterable[str],
        then: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Wake the queues' fetchers once `connection`'s transaction has committed,
        after running `then()` if given (work that must see the commit).

        Called from SQLAlchemy's "commit" event, which fires *before* the database
        commits: a fetcher woken then could claim before the rows are visible, find
        nothing, and wait a whole `max_fetch_interval`. So the wake-up waits for the
        transaction to end, and is dropped if the commit failed.
        """
        transaction = connection.get_transaction()
        if transaction is None:  # not expected from the event; waking early beats never
            self.wake(queues)
            return
        task = asyncio.get_running_loop().create_task(
            self._wake_when_committed(connection, transaction, set(queues), then)
        )
        self._after_commit.add(task)
        task.add_done_callback(self._after_commit.discard)

    async def _wake_when_committed(
        self,
        connection: Connection,
        transaction: RootTransaction,
        queues: set[str],
        then: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        # No event marks the end of the commit; it usually takes a disk flush, so the
        # check backs off from the next loop turn to 50 ms between looks.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + COMMIT_WAIT_LIMIT
        delay = 0.0
        while transaction.is_active:
            if loop.time() > deadline:
                return
            await asyncio.sleep(delay)
            delay = min(0.05, max(0.0005, delay * 2))
        # A failed commit stays the connection's transaction until it is rolled back.
        if connection.get_transaction() is not transaction:
            if then is not None:
                await then()
            self.wake(queues)
