"""The prefetch buffer: claimed messages waiting for a worker."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from faststream_sqla.message import ClaimedMessage


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

    def messages(self) -> list[ClaimedMessage]:
        """The buffered messages, in order, without the stop sentinels."""
        return [item for item in self.items if item is not None]

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
