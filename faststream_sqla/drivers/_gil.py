"""Prompt GIL hand-offs while the broker's work runs on a driver's own thread.

aiosqlite runs SQLite on a thread of its own, which needs the GIL back after every
statement step. While handlers keep the event loop busy, that thread waits for the GIL
at each hand-off until CPython's switch interval (5 ms by default) makes the loop let
go, so a claim of ten such hand-offs took several times as long as on an idle loop,
long enough for the prefetch buffer to run dry (docs/benchmarks.md#sqlite-and-the-gil).
While a call of ours runs there, the interval is shortened.
"""

from __future__ import annotations

import sys
import threading
from types import TracebackType

#: The switch interval (seconds) while a broker call runs on a driver's thread; None
#: leaves CPython's alone. Set it before starting the broker.
DRIVER_SWITCH_INTERVAL: float | None = 0.0005


class ShortSwitchInterval:
    """A context manager: the interval is DRIVER_SWITCH_INTERVAL while any call is inside
    it, and what it was before once the last one leaves, unless something else changed it
    meanwhile (then that value is kept)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside = 0
        self._saved: float | None = None
        self._set: float | None = None

    def __enter__(self) -> None:
        with self._lock:
            target = DRIVER_SWITCH_INTERVAL
            if self._inside == 0 and target is not None:
                current = sys.getswitchinterval()
                if current > target:
                    sys.setswitchinterval(target)
                    self._saved, self._set = current, sys.getswitchinterval()
            self._inside += 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        with self._lock:
            self._inside -= 1
            if self._inside == 0 and self._saved is not None:
                if sys.getswitchinterval() == self._set:
                    sys.setswitchinterval(self._saved)
                self._saved = self._set = None


short_switch_interval = ShortSwitchInterval()
