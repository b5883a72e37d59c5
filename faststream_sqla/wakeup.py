"""In-process wake-ups: a publish wakes the fetch loops of local subscribers at once."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Connection, RootTransaction

#: how long a commit is waited for before its wake-up is given up (polling covers it)
COMMIT_WAIT_LIMIT = 60.0


class WakeupHub:
    """Maps queue names to the events of the fetch loops that consume them."""

    def __init__(self) -> None:
        self._events: defaultdict[str, set[asyncio.Event]] = defaultdict(set)
        self._after_commit: set[asyncio.Task[None]] = set()

    def register(self, queues: Iterable[str], event: asyncio.Event) -> None:
        for queue in queues:
            self._events[queue].add(event)

    def unregister(self, queues: Iterable[str], event: asyncio.Event) -> None:
        for queue in queues:
            self._events[queue].discard(event)

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
