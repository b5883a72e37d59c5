"""Durations as people type them: FastStream's CLI (`faststream publish ... --delay 5`)
and ours pass strings, Python callers numbers or timedeltas. Read here, in one place."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from .exceptions import InvalidOptionError

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"\s*(?P<number>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>ms|s|m|h|d)?\s*", re.I)


def seconds_of(value: object, what: str = "delay") -> float:
    """`value` in seconds: a number, a timedelta, or a string such as "30", "2.5", "5s",
    "500ms", "1m", "2h", "1d". Anything else is an InvalidOptionError naming `what`.
    Bounds are the caller's to check."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            msg = f"{what} must be a finite number of seconds, got {value!r}"
            raise InvalidOptionError(msg)
        return float(value)
    if isinstance(value, str) and (m := _DURATION.fullmatch(value)):
        return float(m["number"]) * _UNITS[(m["unit"] or "s").lower()]
    msg = (
        f"{what} must be seconds (e.g. 30 or 2.5) or a duration such as 500ms, 5s, 1m, 2h "
        f"or 1d; got {value!r}"
    )
    raise InvalidOptionError(msg)
