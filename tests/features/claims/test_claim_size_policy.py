"""The claim-size policy on its own: sizes stay in bounds and move toward the band."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from faststream_sqla.subscriber.claim_size import (
    GROW_BELOW_SECONDS,
    SHRINK_ABOVE_SECONDS,
    TARGET_SECONDS,
    ClaimSizer,
)


def sizer(smallest: int = 10, largest: int = 1000, overfetch: float = 2.0) -> ClaimSizer:
    return ClaimSizer(smallest=smallest, largest=largest, overfetch_factor=overfetch)


def test_starts_at_the_smallest_claim() -> None:
    s = sizer()
    assert (s.size, s.capacity) == (10, 20)


def test_fast_workers_take_the_claim_to_the_largest_in_one_step() -> None:
    s = sizer(smallest=100, largest=1000)
    assert s.observe(taken=s.capacity, seconds=0.001)  # the buffer's worth in a millisecond
    assert s.size == 1000
    assert not s.observe(taken=s.capacity, seconds=0.001)  # already as large as allowed
    assert s.size == 1000


def test_a_fast_rate_below_the_limit_sizes_the_buffer_to_the_target() -> None:
    s = sizer(smallest=100, largest=10_000)  # capacity 200
    assert s.observe(taken=200, seconds=0.05)  # 4,000 msg/s: the buffer lasts 0.05 s
    # at 4,000 msg/s, TARGET_SECONDS of work is 2,000 messages: a claim of 1,000
    assert s.size == int(4000 * TARGET_SECONDS / 2) == 1000
    assert not s.observe(taken=2000, seconds=0.5)  # the same rate: inside the band


def test_slow_workers_shrink_it_to_what_their_rate_needs() -> None:
    s = sizer(smallest=100, largest=1000)
    s.size = 1000
    assert s.observe(taken=1, seconds=1.0)  # one message a second
    assert s.size == 100
    s = sizer(smallest=10, largest=1000)
    s.size = 1000
    assert s.observe(taken=100, seconds=1.0)  # 100 msg/s: 2,000 buffered is 20 s
    assert s.size == int(100 * TARGET_SECONDS / 2) == 25


def test_rounding_never_stalls_a_resize() -> None:
    s = sizer(smallest=1, largest=10, overfetch=1.5)  # capacity 1
    # 4.5 msg/s: the buffer of one lasts 0.22 s, too little; the rate's own size,
    # 4.5 * 0.5 / 1.5 = 1.5, rounds down to the current size
    assert s.observe(taken=9, seconds=2.0)
    assert s.size == 2


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
    for _ in range(4):  # then four in 4 ms, 1,000 msg/s: straight to the largest
        s.observe(taken=1, seconds=0.001)
    assert s.size == 64


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
        before, held = s.size, s.capacity / rate
        s.observe(s.capacity, s.capacity / rate)
        assert smallest <= s.size <= smallest + extra
        # a resize only ever moves toward the band
        if held < GROW_BELOW_SECONDS:
            assert s.size >= before
        elif held > SHRINK_ABOVE_SECONDS:
            assert s.size <= before
        else:
            assert s.size == before
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
