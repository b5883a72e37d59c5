"""A rate limit's sliding window: at most `count` claims in any `period`, on the
database's clock.

The window is kept as the counts of its last SLOTS + 1 slots, each a tenth of the
period wide, stored in the limited row (`rate_slot`, `rate_counts`). A claim may take
what the count leaves after every slot that overlaps the last period, the oldest one
whole; so no period-long stretch of time ever holds more than `count` claims, and a
steady stream gets at least SLOTS / (SLOTS + 1) of the rate. Pure functions: the
channel claim reads the window under its lock and writes it back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .limits import Rate

SLOTS = 10


@dataclass(frozen=True)
class Window:
    """The counts of slots `slot - SLOTS` to `slot`, oldest first."""

    slot: int
    counts: tuple[int, ...]

    def encode(self) -> str:
        return ",".join(map(str, self.counts))


def slot_of(rate: Rate, now: float) -> int:
    """The slot `now` (seconds since 1970) falls in."""
    return math.floor(now * SLOTS / rate.period)


def window_at(stored_slot: int | None, stored_counts: str | None, rate: Rate, now: float) -> Window:
    """The stored window moved on to `now`'s slot; an empty one if nothing valid is
    stored, or if the stored slot lies ahead (the period was changed)."""
    slot = slot_of(rate, now)
    empty = Window(slot, (0,) * (SLOTS + 1))
    if stored_slot is None or not stored_counts or stored_slot > slot:
        return empty
    try:
        counts = tuple(int(part) for part in stored_counts.split(","))
    except ValueError:
        return empty
    if len(counts) != SLOTS + 1:
        return empty
    shift = slot - stored_slot
    if shift > SLOTS:
        return empty
    return Window(slot, counts[shift:] + (0,) * shift)


def allowance(window: Window, rate: Rate) -> int:
    """How many claims the window lets start now."""
    return max(0, rate.count - sum(window.counts))


def taken(window: Window, count: int) -> Window:
    """The window after `count` more claims now."""
    return Window(window.slot, (*window.counts[:-1], window.counts[-1] + count))
