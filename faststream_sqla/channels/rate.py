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
    """The counts of slots `slot - SLOTS` to `slot`, oldest first, each slot a tenth of
    `period` seconds wide."""

    slot: int
    counts: tuple[int, ...]
    period: float

    def encode(self) -> str:
        """Stored as `period:count,count,...` (the period to read the slots by)."""
        return f"{self.period!r}:" + ",".join(map(str, self.counts))


def slot_of(period: float, now: float) -> int:
    """The slot `now` (seconds since 1970) falls in, for slots a tenth of `period`."""
    return math.floor(now * SLOTS / period)


def _decode(stored: str) -> tuple[float | None, tuple[int, ...]] | None:
    period_text, _, counts_text = stored.rpartition(":")
    try:
        period = float(period_text) if period_text else None
        counts = tuple(int(part) for part in counts_text.split(","))
    except ValueError:
        return None
    if len(counts) != SLOTS + 1 or (period is not None and not period > 0):
        return None
    return period, counts


def window_at(stored_slot: int | None, stored_counts: str | None, rate: Rate, now: float) -> Window:
    """The stored window moved on to `now`'s slot (empty if nothing valid is stored).

    A window counted under another period (the rate was changed) is carried over, not
    forgotten: each old slot's count moves to the new slot that holds the old slot's
    end, so every claim stays counted at least as long as it happened ago."""
    slot = slot_of(rate.period, now)
    empty = Window(slot, (0,) * (SLOTS + 1), rate.period)
    decoded = None if stored_slot is None or not stored_counts else _decode(stored_counts)
    if decoded is None:
        return empty
    period, counts = decoded
    if period is None or period == rate.period:
        shift = slot - stored_slot  # type: ignore[operator]
        if shift < 0 or shift > SLOTS:
            return empty
        return Window(slot, counts[shift:] + (0,) * shift, rate.period)
    moved = [0] * (SLOTS + 1)
    for i, count in enumerate(counts):
        if not count:
            continue
        old_slot = stored_slot - SLOTS + i  # type: ignore[operator]
        ended = (old_slot + 1) * period / SLOTS
        new_slot = min(slot, math.floor(ended * SLOTS / rate.period))
        if new_slot >= slot - SLOTS:
            moved[new_slot - (slot - SLOTS)] += count
    return Window(slot, tuple(moved), rate.period)


def allowance(window: Window, rate: Rate) -> int:
    """How many claims the window lets start now."""
    return max(0, rate.count - sum(window.counts))


def taken(window: Window, count: int) -> Window:
    """The window after `count` more claims now."""
    return Window(window.slot, (*window.counts[:-1], window.counts[-1] + count), window.period)
