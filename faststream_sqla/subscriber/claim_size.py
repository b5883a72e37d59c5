"""How many messages a subscriber claims at once: grown while handlers are fast, kept
small while they are slow.

A large claim costs the database less per message (one statement, one commit, one
index walk for many rows), so a backlog drains faster with claims of hundreds. But
every claimed message is leased to this process until it is handled: with slow
handlers, a large claim holds messages that another process could be running, and
keeps them waiting in the buffer. So the claim is sized from the rate the workers
actually take messages: the prefetch buffer should hold between GROW_BELOW_SECONDS
and SHRINK_ABOVE_SECONDS of work. When it falls outside that band, the claim moves in
one step, within [fetch_batch_size, max_fetch_batch_size], to the size whose buffer
holds TARGET_SECONDS at the rate just seen: a burst reaches large claims after one
buffer's worth of messages instead of a doubling per buffer. The band is four times
wide around the target, so a steady rate settles on one size instead of flapping.

Takes come in bursts (a worker takes a message at once, then runs it), so the rate is
judged over a window of at least a buffer's worth of takes, or a second, never over
one short gap between claims.
"""

from __future__ import annotations

#: grow the claim while the full buffer would be emptied faster than this
GROW_BELOW_SECONDS = 0.25
#: shrink it while the full buffer holds more work than this
SHRINK_ABOVE_SECONDS = 1.0
#: a resize aims for a full buffer holding this much work: the band's geometric middle
TARGET_SECONDS = 0.5


def buffer_capacity(claim_size: int, overfetch_factor: float) -> int:
    """Messages the prefetch buffer may hold for claims of `claim_size`: at least one."""
    return max(claim_size, int(claim_size * overfetch_factor))


class ClaimSizer:
    """The current claim size, and the prefetch buffer's capacity that follows it."""

    def __init__(self, *, smallest: int, largest: int, overfetch_factor: float) -> None:
        if not 1 <= smallest <= largest:
            msg = f"claim sizes need 1 <= smallest <= largest, got {smallest}, {largest}"
            raise ValueError(msg)
        self.smallest, self.largest = smallest, largest
        self.overfetch_factor = overfetch_factor
        self.size = smallest
        self._taken = 0
        self._seconds = 0.0

    @property
    def capacity(self) -> int:
        """Messages the prefetch buffer may hold at the current claim size."""
        return buffer_capacity(self.size, self.overfetch_factor)

    def observe(self, taken: int, seconds: float) -> bool:
        """Workers took `taken` more messages from the buffer in `seconds` more; once
        the window is long enough, resize the claim if the buffer's capacity is out of
        the band at the window's rate. True if the size changed."""
        self._taken += taken
        self._seconds += seconds
        if self._taken < self.capacity and self._seconds < SHRINK_ABOVE_SECONDS:
            return False  # too short a window to judge by
        taken, seconds = self._taken, self._seconds
        self._taken, self._seconds = 0, 0.0
        if taken <= 0 or seconds <= 0:
            return False  # nothing taken: no rate to judge by (idle, or just woken)
        buffered_seconds = self.capacity * seconds / taken
        if GROW_BELOW_SECONDS <= buffered_seconds <= SHRINK_ABOVE_SECONDS:
            return False
        # Out of the band: the size whose buffer holds TARGET_SECONDS at this rate
        # (about double the size or more when growing, half or less when shrinking),
        # and at least one message in that direction, which rounding could swallow.
        wanted = int(taken / seconds * TARGET_SECONDS / self.overfetch_factor)
        if buffered_seconds < GROW_BELOW_SECONDS:
            wanted = max(wanted, self.size + 1)
        else:
            wanted = min(wanted, self.size - 1)
        size = min(self.largest, max(self.smallest, wanted))
        if size == self.size:
            return False  # already at the bound the rate pushes toward
        self.size = size
        return True
