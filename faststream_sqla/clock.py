"""The database clock as a SQL expression, rendered once per driver.

All timestamps that decide eligibility (created_at, next_attempt_at, acquired_at,
the release-stuck cutoff) come from the database server, so processes whose own
clocks are skewed still agree. Values are naive UTC with microseconds.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, overload

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement


class utc_now(FunctionElement[datetime]):
    """Current UTC time of the database, optionally shifted by `offset_seconds`."""

    type = sa.DateTime()
    inherit_cache = True
    name = "utc_now"

    def __init__(self, offset_seconds: Any = None) -> None:
        args = () if offset_seconds is None else (offset_seconds,)
        super().__init__(*args)


def _offset(element: utc_now, compiler: Any, **kw: Any) -> str | None:
    clauses = list(element.clauses)
    return compiler.process(clauses[0], **kw) if clauses else None


@compiles(utc_now, "postgresql")
def _pg(element: utc_now, compiler: Any, **kw: Any) -> str:
    # now() (transaction start) is STABLE, so the planner can use it as an index bound;
    # our own transactions are short, so it is the time of the statement.
    base = "(now() AT TIME ZONE 'UTC')"
    off = _offset(element, compiler, **kw)
    return base if off is None else f"({base} + make_interval(secs => {off}))"


@compiles(utc_now, "mysql")
@compiles(utc_now, "mariadb")
def _mysql(element: utc_now, compiler: Any, **kw: Any) -> str:
    off = _offset(element, compiler, **kw)
    if off is None:
        return "UTC_TIMESTAMP(6)"
    return f"(UTC_TIMESTAMP(6) + INTERVAL ROUND({off} * 1000000) MICROSECOND)"


@compiles(utc_now, "sqlite")
def _sqlite(element: utc_now, compiler: Any, **kw: Any) -> str:
    # SQLAlchemy stores SQLite datetimes as 'YYYY-MM-DD HH:MM:SS.ffffff' text; %f gives
    # milliseconds, so pad to six digits to keep text comparison exact.
    off = _offset(element, compiler, **kw)
    modifier = "" if off is None else f", ({off}) || ' seconds'"
    return f"(strftime('%Y-%m-%d %H:%M:%f', 'now'{modifier}) || '000')"


@overload
def to_aware(value: datetime) -> datetime: ...
@overload
def to_aware(value: datetime | None) -> datetime | None: ...
def to_aware(value: datetime | None) -> datetime | None:
    """Database values are naive UTC; users get aware UTC datetimes."""
    if value is None:
        return None
    if isinstance(value, str):  # raw SQLite text from textual SQL
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def to_naive_utc(value: datetime) -> datetime:
    """Aware datetime -> naive UTC for storage. Naive input is refused upstream."""
    return value.astimezone(timezone.utc).replace(tzinfo=None)


MICROSECOND = timedelta(microseconds=1)
_EPOCH = datetime(1970, 1, 1)


def micros_since_epoch(value: datetime | None) -> int | None:
    """A naive UTC time as whole microseconds since 1970: a number every database turns
    back into the same timestamp exactly, and cheaper to send than a formatted time."""
    return None if value is None else (value - _EPOCH) // MICROSECOND
