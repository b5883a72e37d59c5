"""The claim-size policy on its own: sizes stay in bounds and move toward the band."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from faststream_sqla.subscriber.claim_size import (
    GROW_BELOW_SECONDS,
    SHRINK_ABOVE_SECONDS,
    ClaimSizer,
)


def sizer(smallest: int = 10, largest: int = 1000, overfetch: float = 2.0) -> ClaimSizer:
    return ClaimSizer(smallest=smallest, largest=largest, overfetch_factor=overfetch)


def test_starts_at_the_smallest_claim() -> None:
    s = sizer()
    assert (s.size, s.capacity) == (10, 20)


def test_fast_workers_double_the_claim_up_to_the_largest() -> None:
    s = sizer(smallest=100, largest=1000)
    sizes = []
    for _ in range(6):
        s.observe(taken=s.capacity, seconds=0.001)  # the buffer's worth in a millisecond
        sizes.append(s.size)
    assert sizes == [200, 400, 800, 1000, 1000, 1000]


def test_slow_workers_halve_it_down_to_the_smallest() -> None:
    s = sizer(smallest=100, largest=1000)
    s.size = 1000
    sizes = []
    for _ in range(5):
        s.observe(taken=1, seconds=1.0)  # one message a second
        sizes.append(s.size)
    assert sizes == [500, 250, 125, 100, 100]


def test_nothing_taken_tells_nothing() -> None:
    s = sizer()
    s.size = 40
    assert not s.observe(taken=0, seconds=5.0)
    assert s.size == 40


def test_a_burst_of_takes_is_judged_over_a_longer_window() -> None:
    s = sizer(smallest=2, largest=64)  # capacity 4
    # one worker takes a message at once, then takes one every 0.2 s: judged per gap,
    # the first (1 message in 5 ms) would read as a fast rate and grow the claim
    assert not s.observe(taken=1, seconds=0.005)
    assert not s.observe(taken=1, seconds=0.2)
    assert not s.observe(taken=1, seconds=0.2)
    assert not s.observe(taken=1, seconds=0.2)  # 4 in 0.6 s: 0.6 s of work buffered
    assert s.size == 2
    for _ in range(4):  # then four at once, four times
        s.observe(taken=1, seconds=0.001)
    assert s.size == 4


def test_a_rate_inside_the_band_keeps_the_size() -> None:
    s = sizer(smallest=100, largest=1000)
    s.size = 400  # capacity 800: at 1,600 msg/s that is half a second of work
    assert not s.observe(taken=1600, seconds=1.0)
    assert s.size == 400


def test_the_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="smallest <= largest"):
        sizer(smallest=10, largest=5)


@given(
    smallest=st.integers(1, 500),
    extra=st.integers(0, 5000),
    rates=st.lists(st.floats(0.01, 1e6), min_size=1, max_size=40),
)
def test_sizes_stay_in_bounds_and_settle_under_a_steady_rate(smallest, extra, rates) -> None:
    s = sizer(smallest=smallest, largest=smallest + extra)
    for rate in rates:
        # between two claims the workers took a buffer's worth at `rate` messages a second
        before = s.size
        s.observe(s.capacity, s.capacity / rate)
        assert smallest <= s.size <= smallest + extra
        assert s.size in (before, min(before * 2, s.largest), max(before // 2, s.smallest))
    # under one steady rate, the size stops moving within a few steps and then stays
    rate = rates[-1]
    seen = []
    for _ in range(40):
        s.observe(s.capacity, s.capacity / rate)
        seen.append(s.size)
    assert len(set(seen[-10:])) == 1
    held = s.capacity / rate
    settled_in_band = GROW_BELOW_SECONDS <= held <= SHRINK_ABOVE_SECONDS
    assert settled_in_band or s.size in (s.smallest, s.largest)
