"""Retry strategies for messages whose processing failed.

Retry schedules are pure functions of attempt counts and times: a strategy never reads the
clock or the database, it maps ``(first_attempt_at, last_attempt_at, attempts_count)`` to the
moment the next attempt may start, or to ``None`` when the message must not be retried.
The jitter strategies draw from a ``random.Random`` that can be seeded for deterministic runs.
"""

from __future__ import annotations

import abc
import math
import random as _random
from datetime import datetime, timedelta

from faststream_sqla.exceptions import InvalidOptionError, shown

__all__ = [
    "ConstantRetryStrategy", "ConstantWithJitterRetryStrategy", "ExponentialBackoffRetryStrategy",
    "ExponentialBackoffWithJitterRetryStrategy", "LinearRetryStrategy", "NoRetryStrategy",
    "RetryStrategy",
]  # fmt: skip


def _number(name: str, value: object, *, minimum: float = 0.0, maximum: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidOptionError(f"{name} must be a number, got {shown(value)}")
    number = float(value) if isinstance(value, float) or abs(value) < 2**1000 else math.inf
    if not math.isfinite(number) or not minimum <= number <= maximum:
        bounds = f">= {minimum:g}" if maximum == math.inf else f"in [{minimum:g}, {maximum:g}]"
        raise InvalidOptionError(f"{name} must be a finite number {bounds}, got {shown(value)}")
    return number


def _optional_number(name: str, value: object) -> float | None:
    return None if value is None else _number(name, value)


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidOptionError(f"{name} must be an integer >= 1, got {shown(value)}")
    return value


def _aware(name: str, value: object) -> datetime:
    if not isinstance(value, datetime):
        raise InvalidOptionError(f"{name} must be a datetime, got {shown(value)}")
    if value.utcoffset() is None:
        raise InvalidOptionError(f"{name} must be timezone-aware (UTC), got naive {shown(value)}")
    return value


def _exponential(
    initial: float, multiplier: float, cap: float | None, attempts_count: int
) -> float:
    try:
        delay = initial * multiplier ** (attempts_count - 1)
    except OverflowError:
        delay = math.inf
    return delay if cap is None else min(delay, cap)


class RetryStrategy(abc.ABC):
    """Base class: decides when, and whether, a failed message is attempted again."""

    max_attempts: int | None
    max_total_delay_seconds: float | None
    _params: tuple[str, ...] = ()

    def __init__(
        self, *, max_attempts: int | None = None, max_total_delay_seconds: float | None = None
    ) -> None:
        self.max_attempts = None if max_attempts is None else _count("max_attempts", max_attempts)
        limit = _optional_number("max_total_delay_seconds", max_total_delay_seconds)
        self.max_total_delay_seconds = limit

    def get_next_attempt_at(
        self, *, first_attempt_at: datetime, last_attempt_at: datetime, attempts_count: int
    ) -> datetime | None:
        """When the next attempt may start (``last_attempt_at + delay``), or ``None``.

        ``attempts_count`` counts the attempts made so far, including the one that just failed.
        ``None`` means: ``max_attempts`` is used up, the retry would start later than
        ``first_attempt_at + max_total_delay_seconds``, or the delay is unrepresentably large.
        """
        first = _aware("first_attempt_at", first_attempt_at)
        last = _aware("last_attempt_at", last_attempt_at)
        _count("attempts_count", attempts_count)
        if self.max_attempts is not None and attempts_count >= self.max_attempts:
            return None
        try:
            next_at = last + timedelta(seconds=self.delay_seconds(attempts_count))
            limit = self.max_total_delay_seconds
            if limit is not None and next_at > first + timedelta(seconds=limit):
                return None
        except (OverflowError, ValueError):  # infinite delay or past datetime.max
            return None
        return next_at

    @abc.abstractmethod
    def delay_seconds(self, attempts_count: int) -> float:
        """Delay before the next attempt after ``attempts_count`` (>= 1) failed attempts."""

    def __repr__(self) -> str:
        names = (*self._params, "max_attempts", "max_total_delay_seconds")
        args = ", ".join(f"{n}={getattr(self, '_' + n, getattr(self, n, None))!r}" for n in names)
        return f"{type(self).__name__}({args})"


class NoRetryStrategy(RetryStrategy):
    """Never retry: a message is finished after its first failed attempt."""

    def get_next_attempt_at(
        self, *, first_attempt_at: datetime, last_attempt_at: datetime, attempts_count: int
    ) -> datetime | None:
        kwargs = {"first_attempt_at": first_attempt_at, "last_attempt_at": last_attempt_at}
        super().get_next_attempt_at(**kwargs, attempts_count=attempts_count)  # validation only
        return None

    def delay_seconds(self, attempts_count: int) -> float:
        return 0.0


class ConstantRetryStrategy(RetryStrategy):
    """Retry after the same fixed ``delay_seconds`` every time."""

    _params = ("delay_seconds",)

    def __init__(
        self, *, delay_seconds: float,
        max_attempts: int | None = None, max_total_delay_seconds: float | None = None,
    ) -> None:  # fmt: skip
        super().__init__(max_attempts=max_attempts, max_total_delay_seconds=max_total_delay_seconds)
        self._delay_seconds = _number("delay_seconds", delay_seconds)

    def delay_seconds(self, attempts_count: int) -> float:
        return self._delay_seconds


class LinearRetryStrategy(RetryStrategy):
    """Delay grows by a fixed step: ``initial_delay_seconds + step_seconds * (n - 1)``."""

    _params = ("initial_delay_seconds", "step_seconds")

    def __init__(
        self, *, initial_delay_seconds: float, step_seconds: float,
        max_attempts: int | None = None, max_total_delay_seconds: float | None = None,
    ) -> None:  # fmt: skip
        super().__init__(max_attempts=max_attempts, max_total_delay_seconds=max_total_delay_seconds)
        self.initial_delay_seconds = _number("initial_delay_seconds", initial_delay_seconds)
        self.step_seconds = _number("step_seconds", step_seconds)

    def delay_seconds(self, attempts_count: int) -> float:
        return self.initial_delay_seconds + self.step_seconds * (attempts_count - 1)


class _Exponential(RetryStrategy):
    """What both exponential strategies share: the checked initial delay, multiplier
    and cap, and the delay ``initial_delay_seconds * multiplier ** (n - 1)`` capped at
    ``max_delay_seconds``."""

    def __init__(
        self, *, initial_delay_seconds: float, multiplier: float = 2.0,
        max_delay_seconds: float | None = None,
        max_attempts: int | None = None, max_total_delay_seconds: float | None = None,
    ) -> None:  # fmt: skip
        super().__init__(max_attempts=max_attempts, max_total_delay_seconds=max_total_delay_seconds)
        self.initial_delay_seconds = _number("initial_delay_seconds", initial_delay_seconds)
        self.multiplier = _number("multiplier", multiplier, minimum=1.0)
        self.max_delay_seconds = _optional_number("max_delay_seconds", max_delay_seconds)

    def _backoff(self, attempts_count: int) -> float:
        return _exponential(
            self.initial_delay_seconds, self.multiplier, self.max_delay_seconds, attempts_count
        )


class ExponentialBackoffRetryStrategy(_Exponential):
    """Delay ``initial_delay_seconds * multiplier ** (n - 1)``, capped at ``max_delay_seconds``."""

    _params = ("initial_delay_seconds", "multiplier", "max_delay_seconds")

    def delay_seconds(self, attempts_count: int) -> float:
        return self._backoff(attempts_count)


class ConstantWithJitterRetryStrategy(RetryStrategy):
    """``delay_seconds`` plus uniform jitter in ``[-jitter_seconds, +jitter_seconds]``, >= 0.

    ``base_delay_seconds`` is accepted as an alias of ``delay_seconds``.
    """

    _params = ("delay_seconds", "jitter_seconds")

    def __init__(
        self, *, delay_seconds: float | None = None, jitter_seconds: float,
        random: _random.Random | None = None, base_delay_seconds: float | None = None,
        max_attempts: int | None = None, max_total_delay_seconds: float | None = None,
    ) -> None:  # fmt: skip
        super().__init__(max_attempts=max_attempts, max_total_delay_seconds=max_total_delay_seconds)
        if (delay_seconds is None) == (base_delay_seconds is None):
            raise InvalidOptionError(
                "pass exactly one of delay_seconds and base_delay_seconds, got "
                f"delay_seconds={shown(delay_seconds)}, "
                f"base_delay_seconds={shown(base_delay_seconds)}"
            )
        if delay_seconds is None:
            self._delay_seconds = _number("base_delay_seconds", base_delay_seconds)
        else:
            self._delay_seconds = _number("delay_seconds", delay_seconds)
        self.jitter_seconds = _number("jitter_seconds", jitter_seconds)
        self._random = random if random is not None else _random.Random()

    def delay_seconds(self, attempts_count: int) -> float:
        jitter = self._random.uniform(-self.jitter_seconds, self.jitter_seconds)
        return max(0.0, self._delay_seconds + jitter)


class ExponentialBackoffWithJitterRetryStrategy(_Exponential):
    """Exponential backoff scaled by uniform ``[1 - jitter_factor, 1 + jitter_factor]``.

    The result never exceeds ``max_delay_seconds`` and is never negative.
    """

    _params = ("initial_delay_seconds", "multiplier", "max_delay_seconds", "jitter_factor")

    def __init__(
        self, *, initial_delay_seconds: float, multiplier: float = 2.0,
        max_delay_seconds: float | None = None, jitter_factor: float = 0.1,
        random: _random.Random | None = None,
        max_attempts: int | None = None, max_total_delay_seconds: float | None = None,
    ) -> None:  # fmt: skip
        super().__init__(
            initial_delay_seconds=initial_delay_seconds, multiplier=multiplier,
            max_delay_seconds=max_delay_seconds,
            max_attempts=max_attempts, max_total_delay_seconds=max_total_delay_seconds,
        )  # fmt: skip
        self.jitter_factor = _number("jitter_factor", jitter_factor, maximum=1.0)
        self._random = random if random is not None else _random.Random()

    def delay_seconds(self, attempts_count: int) -> float:
        base = self._backoff(attempts_count)
        factor = self._random.uniform(1.0 - self.jitter_factor, 1.0 + self.jitter_factor)
        if math.isinf(base):  # inf * 0 would be NaN
            return math.inf
        delay = base * factor
        if self.max_delay_seconds is not None:
            delay = min(delay, self.max_delay_seconds)
        return max(0.0, delay)
