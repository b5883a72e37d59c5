"""How an age, a time and a capped count read for a person, the same in the command
line's tables and the dashboard's pages."""

from __future__ import annotations

from datetime import datetime

_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def age(seconds: float | None) -> str:
    """3725 -> "1h 2m": the two largest units, enough to tell stuck from busy; "-" for
    none."""
    if seconds is None:
        return "-"
    left, parts = int(seconds), list[str]()
    for unit, size in _UNITS:
        if left >= size or (unit == "s" and not parts):
            parts.append(f"{left // size}{unit}")
            left %= size
    return " ".join(parts[:2])


def timestamp(value: datetime | None) -> str:
    """A time to the second, as it is stored (UTC); "-" for none."""
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")
