"""The limits an operator sets on a queue or a channel, checked before they are stored."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from faststream_sqla.durations import seconds_of, whole_number
from faststream_sqla.exceptions import InvalidOptionError, shown

#: the highest max_concurrency accepted (far above any real fleet of workers)
MAX_CONCURRENCY_LIMIT = 1_000_000
#: a rate's starts per period, at most
MAX_RATE_COUNT = 1_000_000
#: a rate's period, in seconds: a tenth of a second to a day (the window has ten slots,
#: each at least 10 ms)
MIN_RATE_PERIOD, MAX_RATE_PERIOD = 0.1, 86_400.0

_PERIOD_NAMES = {
    "s": 1.0, "sec": 1.0, "second": 1.0,
    "m": 60.0, "min": 60.0, "minute": 60.0,
    "h": 3600.0, "hour": 3600.0,
    "d": 86400.0, "day": 86400.0,
}  # fmt: skip
_RATE = re.compile(r"\s*(?P<count>[0-9]+)\s*/\s*(?P<period>.+?)\s*", re.ASCII)


@dataclass(frozen=True)
class Rate:
    """At most `count` claims in any `period` seconds."""

    count: int
    period: float

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int):
            msg = f"a rate's count must be an integer, got {shown(self.count)}"
            raise InvalidOptionError(msg)
        if not 1 <= self.count <= MAX_RATE_COUNT:
            msg = f"a rate's count must be from 1 to {MAX_RATE_COUNT}, got {shown(self.count)}"
            raise InvalidOptionError(msg)
        if not MIN_RATE_PERIOD <= self.period <= MAX_RATE_PERIOD:
            msg = (
                f"a rate's period must be from {MIN_RATE_PERIOD} s to {MAX_RATE_PERIOD:.0f} s "
                f"(a day), got {self.period} s"
            )
            raise InvalidOptionError(msg)

    @classmethod
    def parse(cls, text: str) -> Rate:
        """ "5/s", "100/min", "1000/h", "10/30s": a count, a slash and a period (a unit,
        or a duration as `durations.seconds_of` reads it)."""
        m = _RATE.fullmatch(text)
        if m is None:
            msg = f"a rate must look like 5/s, 100/min, 1000/h or 10/30s; got {shown(text)}"
            raise InvalidOptionError(msg)
        period_text = m["period"].lower()
        period = _PERIOD_NAMES.get(period_text.rstrip("s") if len(period_text) > 3 else period_text)
        if period is None:
            period = seconds_of(period_text, "a rate's period")
        return cls(int(m["count"]), period)

    def __str__(self) -> str:
        for name, seconds in (("s", 1.0), ("min", 60.0), ("h", 3600.0), ("d", 86400.0)):
            if self.period == seconds:
                return f"{self.count}/{name}"
        return f"{self.count}/{self.period:g}s"


def checked_rate(value: object) -> Rate | None:
    """A rate given as Rate, "5/s" text, a (count, period) pair, or None for no limit."""
    if value is None or isinstance(value, Rate):
        return value
    if isinstance(value, str):
        return Rate.parse(value)
    if isinstance(value, tuple) and len(value) == 2:
        count, period = value
        seconds = period.total_seconds() if isinstance(period, timedelta) else period
        return Rate(count, seconds_of(seconds, "a rate's period"))
    msg = f'a rate must be text such as "5/s", a Rate or a (count, period) pair, got {shown(value)}'
    raise InvalidOptionError(msg)


def checked_concurrency(value: object, what: str = "max_concurrency") -> int | None:
    """A concurrency limit: a whole number from 1, or None for no limit."""
    if value is None:
        return None
    if isinstance(value, str) and (number := whole_number(value)) is not None:
        value = number
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{what} must be a whole number or None, got {shown(value)}"
        raise InvalidOptionError(msg)
    if not 1 <= value <= MAX_CONCURRENCY_LIMIT:
        msg = f"{what} must be from 1 to {MAX_CONCURRENCY_LIMIT}, got {shown(value)}"
        raise InvalidOptionError(msg)
    return value


@dataclass(frozen=True)
class LimitsWrite:
    """A change of one control row's settings (ChannelClaim.write_limits): the values
    wanted, and which of them differ from a stored row (None: no row yet), as the
    caller judges sameness."""

    queue: str
    channel: str
    wanted: Mapping[str, Any]
    differing: Callable[[Mapping[str, Any] | None], dict[str, Any]]
