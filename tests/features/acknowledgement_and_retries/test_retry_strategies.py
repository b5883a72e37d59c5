import math
import random
from datetime import datetime, timedelta, timezone

import pytest

from faststream_sqla.exceptions import InvalidOptionError
from faststream_sqla.retry import (
    ConstantRetryStrategy,
    ConstantWithJitterRetryStrategy,
    ExponentialBackoffRetryStrategy,
    ExponentialBackoffWithJitterRetryStrategy,
    LinearRetryStrategy,
    NoRetryStrategy,
    RetryStrategy,
)

try:
    from hypothesis import given
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    given = None

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


def next_at(strategy, attempts_count, *, first=T0, last=None):
    return strategy.get_next_attempt_at(
        first_attempt_at=first, last_attempt_at=last or first, attempts_count=attempts_count
    )


def delays(strategy, n):
    return [strategy.delay_seconds(i) for i in range(1, n + 1)]


def test_constant():
    assert delays(ConstantRetryStrategy(delay_seconds=5), 4) == [5, 5, 5, 5]


def test_linear():
    strategy = LinearRetryStrategy(initial_delay_seconds=1, step_seconds=2)
    assert delays(strategy, 4) == [1, 3, 5, 7]


def test_exponential_and_cap():
    assert delays(ExponentialBackoffRetryStrategy(initial_delay_seconds=1), 5) == [1, 2, 4, 8, 16]
    strategy = ExponentialBackoffRetryStrategy(
        initial_delay_seconds=0.5, multiplier=3, max_delay_seconds=10
    )
    assert delays(strategy, 5) == [0.5, 1.5, 4.5, 10, 10]


def test_exponential_huge_attempt_count_does_not_crash():
    strategy = ExponentialBackoffRetryStrategy(initial_delay_seconds=1)
    assert strategy.delay_seconds(10_000) == math.inf
    assert next_at(strategy, 10_000) is None
    capped = ExponentialBackoffRetryStrategy(initial_delay_seconds=1, max_delay_seconds=60)
    assert next_at(capped, 10_000) == T0 + timedelta(seconds=60)
    jittered = ExponentialBackoffWithJitterRetryStrategy(initial_delay_seconds=1, jitter_factor=1)
    assert next_at(jittered, 10_000) is None


def test_next_attempt_counts_from_last_attempt():
    strategy = LinearRetryStrategy(initial_delay_seconds=10, step_seconds=5)
    last = T0 + timedelta(minutes=3)
    assert next_at(strategy, 3, last=last) == last + timedelta(seconds=20)


def test_no_retry():
    strategy = NoRetryStrategy()
    assert isinstance(strategy, RetryStrategy)
    assert all(next_at(strategy, n) is None for n in (1, 2, 100))


def test_max_attempts_cutoff():
    strategy = ConstantRetryStrategy(delay_seconds=1, max_attempts=3)
    assert next_at(strategy, 1) == T0 + timedelta(seconds=1)
    assert next_at(strategy, 2) == T0 + timedelta(seconds=1)
    assert next_at(strategy, 3) is None
    assert next_at(strategy, 4) is None
    assert next_at(ConstantRetryStrategy(delay_seconds=1, max_attempts=1), 1) is None


def test_max_total_delay_cutoff():
    strategy = ExponentialBackoffRetryStrategy(initial_delay_seconds=10, max_total_delay_seconds=30)
    assert next_at(strategy, 1) == T0 + timedelta(seconds=10)
    # exactly first + 30 s is still allowed
    assert next_at(strategy, 2, last=T0 + timedelta(seconds=10)) == T0 + timedelta(seconds=30)
    assert next_at(strategy, 3, last=T0 + timedelta(seconds=30)) is None
    # the limit is measured from the first attempt, not the last one
    assert next_at(strategy, 1, last=T0 + timedelta(seconds=25)) is None


def test_unlimited_by_default():
    strategy = ConstantRetryStrategy(delay_seconds=1)
    assert strategy.max_attempts is None and strategy.max_total_delay_seconds is None
    assert next_at(strategy, 1_000_000) == T0 + timedelta(seconds=1)


def test_constant_with_jitter_bounds_and_seed():
    def make(seed):
        return ConstantWithJitterRetryStrategy(
            delay_seconds=5, jitter_seconds=2, random=random.Random(seed)
        )

    samples = delays(make(1), 2000)
    assert all(3 <= d <= 7 for d in samples)
    assert min(samples) < 3.1 and max(samples) > 6.9
    assert samples == delays(make(1), 2000)
    assert samples != delays(make(2), 2000)


def test_constant_with_jitter_never_negative_and_alias():
    strategy = ConstantWithJitterRetryStrategy(
        base_delay_seconds=1, jitter_seconds=5, random=random.Random(0)
    )
    samples = delays(strategy, 1000)
    assert min(samples) == 0.0 and max(samples) <= 6
    with pytest.raises(InvalidOptionError, match="delay_seconds"):
        ConstantWithJitterRetryStrategy(delay_seconds=1, base_delay_seconds=1, jitter_seconds=1)
    with pytest.raises(InvalidOptionError, match="delay_seconds"):
        ConstantWithJitterRetryStrategy(jitter_seconds=1)


def test_exponential_with_jitter_bounds():
    strategy = ExponentialBackoffWithJitterRetryStrategy(
        initial_delay_seconds=1, jitter_factor=0.25, max_delay_seconds=20, random=random.Random(7)
    )
    for n in range(1, 8):
        base = min(2 ** (n - 1), 20)
        samples = [strategy.delay_seconds(n) for _ in range(300)]
        assert all(base * 0.75 <= d <= min(base * 1.25, 20) for d in samples)
    exact = ExponentialBackoffWithJitterRetryStrategy(initial_delay_seconds=1, jitter_factor=0)
    assert delays(exact, 4) == [1, 2, 4, 8]


def test_exponential_with_jitter_seeded_is_deterministic():
    def make():
        return ExponentialBackoffWithJitterRetryStrategy(
            initial_delay_seconds=1, random=random.Random(42)
        )

    assert delays(make(), 10) == delays(make(), 10)


@pytest.mark.parametrize(
    ("factory", "kwargs", "name", "bad"),
    [
        (ConstantRetryStrategy, {"delay_seconds": -1}, "delay_seconds", "-1"),
        (ConstantRetryStrategy, {"delay_seconds": math.inf}, "delay_seconds", "inf"),
        (ConstantRetryStrategy, {"delay_seconds": math.nan}, "delay_seconds", "nan"),
        (ConstantRetryStrategy, {"delay_seconds": "5"}, "delay_seconds", "'5'"),
        (ConstantRetryStrategy, {"delay_seconds": 1, "max_attempts": 0}, "max_attempts", "0"),
        (ConstantRetryStrategy, {"delay_seconds": 1, "max_attempts": 1.5}, "max_attempts", "1.5"),
        (NoRetryStrategy, {"max_attempts": -3}, "max_attempts", "-3"),
        (
            ConstantRetryStrategy,
            {"delay_seconds": 1, "max_total_delay_seconds": -0.5},
            "max_total_delay_seconds",
            "-0.5",
        ),
        (
            LinearRetryStrategy,
            {"initial_delay_seconds": 1, "step_seconds": -2},
            "step_seconds",
            "-2",
        ),
        (
            LinearRetryStrategy,
            {"initial_delay_seconds": -1, "step_seconds": 2},
            "initial_delay_seconds",
            "-1",
        ),
        (
            ExponentialBackoffRetryStrategy,
            {"initial_delay_seconds": 1, "multiplier": 0.5},
            "multiplier",
            "0.5",
        ),
        (
            ExponentialBackoffRetryStrategy,
            {"initial_delay_seconds": 1, "max_delay_seconds": -1},
            "max_delay_seconds",
            "-1",
        ),
        (
            ConstantWithJitterRetryStrategy,
            {"delay_seconds": 1, "jitter_seconds": -1},
            "jitter_seconds",
            "-1",
        ),
        (
            ExponentialBackoffWithJitterRetryStrategy,
            {"initial_delay_seconds": 1, "jitter_factor": 1.5},
            "jitter_factor",
            "1.5",
        ),
        (
            ExponentialBackoffWithJitterRetryStrategy,
            {"initial_delay_seconds": 1, "jitter_factor": -0.1},
            "jitter_factor",
            "-0.1",
        ),
        (
            ExponentialBackoffWithJitterRetryStrategy,
            {"initial_delay_seconds": 1, "multiplier": math.inf},
            "multiplier",
            "inf",
        ),
    ],
)
def test_invalid_options(factory, kwargs, name, bad):
    with pytest.raises(InvalidOptionError) as exc_info:
        factory(**kwargs)
    message = str(exc_info.value)
    assert name in message and bad in message
    assert isinstance(exc_info.value, ValueError)


@pytest.mark.parametrize("strategy", [NoRetryStrategy(), ConstantRetryStrategy(delay_seconds=1)])
def test_invalid_call_arguments(strategy):
    naive = datetime(2024, 1, 1)
    with pytest.raises(InvalidOptionError, match="first_attempt_at"):
        strategy.get_next_attempt_at(first_attempt_at=naive, last_attempt_at=T0, attempts_count=1)
    with pytest.raises(InvalidOptionError, match="last_attempt_at"):
        strategy.get_next_attempt_at(first_attempt_at=T0, last_attempt_at=naive, attempts_count=1)
    with pytest.raises(InvalidOptionError, match="attempts_count"):
        next_at(strategy, 0)


def test_keyword_only():
    with pytest.raises(TypeError):
        ConstantRetryStrategy(5)  # type: ignore[misc]


def test_repr_shows_parameters():
    assert repr(ConstantRetryStrategy(delay_seconds=5, max_attempts=3)) == (
        "ConstantRetryStrategy(delay_seconds=5.0, max_attempts=3, max_total_delay_seconds=None)"
    )
    text = repr(
        ExponentialBackoffWithJitterRetryStrategy(
            initial_delay_seconds=1, max_delay_seconds=60, jitter_factor=0.5, max_attempts=8
        )
    )
    for part in (
        "initial_delay_seconds=1.0",
        "multiplier=2.0",
        "max_delay_seconds=60.0",
        "jitter_factor=0.5",
        "max_attempts=8",
        "max_total_delay_seconds=None",
    ):
        assert part in text
    assert repr(NoRetryStrategy()).startswith("NoRetryStrategy(")
    assert "jitter_seconds=2.0" in repr(
        ConstantWithJitterRetryStrategy(delay_seconds=5, jitter_seconds=2)
    )


if given is not None:
    seconds = st.floats(min_value=0, max_value=10_000, allow_nan=False)

    @given(
        base=seconds,
        jitter=seconds,
        seed=st.integers(),
        n=st.integers(min_value=1, max_value=50),
    )
    def test_constant_jitter_property(base, jitter, seed, n):
        strategy = ConstantWithJitterRetryStrategy(
            delay_seconds=base, jitter_seconds=jitter, random=random.Random(seed)
        )
        delay = strategy.delay_seconds(n)
        assert max(0.0, base - jitter) <= delay <= base + jitter

    @given(
        initial=seconds,
        multiplier=st.floats(min_value=1, max_value=10),
        cap=st.none() | seconds,
        factor=st.floats(min_value=0, max_value=1),
        seed=st.integers(),
        n=st.integers(min_value=1, max_value=2000),
    )
    def test_exponential_jitter_property(initial, multiplier, cap, factor, seed, n):
        strategy = ExponentialBackoffWithJitterRetryStrategy(
            initial_delay_seconds=initial,
            multiplier=multiplier,
            max_delay_seconds=cap,
            jitter_factor=factor,
            random=random.Random(seed),
        )
        plain = ExponentialBackoffRetryStrategy(
            initial_delay_seconds=initial, multiplier=multiplier, max_delay_seconds=cap
        ).delay_seconds(n)
        delay = strategy.delay_seconds(n)
        assert delay >= 0
        if cap is not None:
            assert delay <= cap
        if math.isfinite(plain):
            assert plain * (1 - factor) * (1 - 1e-9) <= delay <= plain * (1 + factor) * (1 + 1e-9)

    @given(
        initial=seconds,
        step=seconds,
        max_attempts=st.none() | st.integers(min_value=1, max_value=20),
        max_total=st.none() | seconds,
        n=st.integers(min_value=1, max_value=30),
        elapsed=seconds,
    )
    def test_schedule_respects_limits_property(initial, step, max_attempts, max_total, n, elapsed):
        strategy = LinearRetryStrategy(
            initial_delay_seconds=initial,
            step_seconds=step,
            max_attempts=max_attempts,
            max_total_delay_seconds=max_total,
        )
        last = T0 + timedelta(seconds=elapsed)
        result = next_at(strategy, n, last=last)
        if max_attempts is not None and n >= max_attempts:
            assert result is None
        elif result is not None:
            assert result == last + timedelta(seconds=strategy.delay_seconds(n))
            if max_total is not None:
                assert result <= T0 + timedelta(seconds=max_total)
        else:
            assert max_total is not None
