"""In-process wake-ups: a publish wakes the fetch loops of local subscribers at once."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import asyncio


class WakeupHub:
    """Maps queue names to the events of the fetch loops that consume them."""

    def __init__(self) -> None:
        self._events: defaultdict[str, set[asyncio.Event]] = defaultdict(set)

    def register(self, queues: Iterable[str], event: asyncio.Event) -> None:
        for queue in queues:
            self._events[queue].add(event)

    def unregister(self, queues: Iterable[str], event: asyncio.Event) -> None:
        for queue in queues:
            self._events[queue].discard(event)

    def wake(self, queues: Iterable[str]) -> None:
        for queue in queues:
            for event in self._events.get(queue, ()):
                event.set()
