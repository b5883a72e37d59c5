"""Durations and whole numbers as people type them: FastStream's CLI (`faststream
publish ... --delay 5`) and ours pass strings, Python callers numbers or timedeltas.
Read here, in one place.

Only ASCII digits count: `int()`, `float()`, `str.isdigit()` and a regex's digit class
also take other scripts' digits (a fullwidth or an Arabic-Indic 5), so a value would be
stored other than as typed; and `isdigit()` takes superscripts, which `int()` refuses."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from .exceptions import InvalidOptionError, shown

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(
    r"\s*(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(?P<unit>ms|s|m|h|d)?\s*", re.I | re.ASCII
)
_INTEGER = re.compile(r"\s*-?[0-9]+\s*", re.ASCII)


#: a duration as the API takes it: seconds, or a timedelta
Seconds = float | timedelta


def plain_seconds(value: object) -> object:
    """A timedelta as its seconds; any other value as given, for its caller to check."""
    return value.total_seconds() if isinstance(value, timedelta) else value


def in_seconds(value: Seconds) -> float:
    """`plain_seconds` for an option typed as a duration (a wrong type is passed on as
    given, for the option's own check to name)."""
    return value.total_seconds() if isinstance(value, timedelta) else value


def integer(text: str) -> int | None:
    """`text` as an integer in ASCII digits, with an optional minus sign and spaces
    around; None if it is not one."""
    return int(text) if _INTEGER.fullmatch(text) else None


def whole_number(text: str) -> int | None:
    """`text` as a whole number from 0 in ASCII digits; None if it is not one."""
    number = integer(text)
    return None if number is None or text.strip().startswith("-") else number


def seconds_of(value: object, what: str = "delay") -> float:
    """`value` in seconds: a number, a timedelta, or a string such as "30", "2.5", "5s",
    "500ms", "1m", "2h", "1d". Anything else is an InvalidOptionError naming `what`.
    Bounds are the caller's to check."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            msg = f"{what} must be a finite number of seconds, got {shown(value)}"
            raise InvalidOptionError(msg)
        return float(value)
    if isinstance(value, str) and (m := _DURATION.fullmatch(value)):
        return float(m["number"]) * _UNITS[(m["unit"] or "s").lower()]
    msg = (
        f"{what} must be seconds (e.g. 30 or 2.5) or a duration such as 500ms, 5s, 1m, 2h "
        f"or 1d; got {shown(value)}"
    )
    raise InvalidOptionError(msg)
