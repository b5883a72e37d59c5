"""When a schedule fires: pure functions of its timing and the database's time.

Every time here is naive UTC, as the tables hold them. A cron expression is read in the
schedule's time zone (croniter), so "0 9 * * *" in Europe/Berlin fires at nine local
time on both sides of a daylight-saving change.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from faststream_sqla.exceptions import InvalidOptionError, shown
from faststream_sqla.schema import MAX_CRON_LENGTH, MAX_TIMEZONE_LENGTH

#: the shortest and longest interval: shorter than a second is a busy loop across
#: processes, longer than ten years a typo
MIN_EVERY = timedelta(seconds=1)
MAX_EVERY = timedelta(days=3650)
#: the most ticks one firing publishes after a downtime
MAX_CATCH_UP_LIMIT = 1000
DEFAULT_CATCH_UP_LIMIT = 10


class Missed(str, enum.Enum):
    """What a schedule does with the ticks that fell due while no process fired it."""

    #: only the latest due tick fires; the earlier ones are dropped
    SKIP = "skip"
    #: each due tick fires, oldest first, at most `catch_up_limit` of them (the latest)
    CATCH_UP = "catch_up"


class Kind(str, enum.Enum):
    INTERVAL = "interval"
    CRON = "cron"


@dataclass(frozen=True)
class Timing:
    """An interval (`every`) or a cron expression read in `timezone`."""

    kind: Kind
    every: timedelta | None = None
    cron: str | None = None
    timezone: str | None = None

    @staticmethod
    def of(every: timedelta | float | None, cron: str | None, tz: str | None) -> Timing:
        """The timing given to a declaration, checked."""
        if (every is None) == (cron is None):
            msg = "a schedule needs exactly one of every= (an interval) and cron= (an expression)"
            raise InvalidOptionError(msg)
        if every is not None:
            if tz is not None:
                msg = "timezone= applies to cron schedules only; an interval runs on elapsed time"
                raise InvalidOptionError(msg)
            return Timing(Kind.INTERVAL, every=checked_every(every))
        zone = checked_timezone("UTC" if tz is None else tz)
        return Timing(Kind.CRON, cron=checked_cron(cron), timezone=zone)

    @staticmethod
    def stored(kind: str, every_seconds: float | None, cron: str | None, tz: str | None) -> Timing:
        """The timing as a schedule row holds it."""
        if Kind(kind) is Kind.INTERVAL:
            assert every_seconds is not None
            return Timing(Kind.INTERVAL, every=timedelta(seconds=every_seconds))
        return Timing(Kind.CRON, cron=cron, timezone=tz or "UTC")

    @property
    def every_seconds(self) -> float | None:
        return None if self.every is None else self.every.total_seconds()

    @property
    def cron_expression(self) -> str:
        """`cron`, for code that handles cron timings only."""
        if self.cron is None:
            raise InvalidOptionError("a cron schedule needs an expression (cron=)")
        return self.cron

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after `moment` (cron), or one interval on."""
        if self.every is not None:
            return moment + self.every
        zone = ZoneInfo(self.timezone or "UTC")
        local = moment.replace(tzinfo=timezone.utc).astimezone(zone)
        found: datetime = croniter(self.cron_expression, local).get_next(datetime)
        return _naive_utc(found)

    def due(self, next_fire_at: datetime, now: datetime, missed: Missed, limit: int) -> FirePlan:
        """The ticks to fire at `now` of a schedule due at `next_fire_at` (<= now), and
        when it is due next. Costs O(ticks fired), however long nothing ran."""
        keep = 1 if missed is Missed.SKIP else limit
        if self.every is not None:
            behind = (now - next_fire_at) // self.every + 1  # ticks at or before now
            first = max(0, behind - keep)
            ticks = [next_fire_at + k * self.every for k in range(first, behind)]
            return FirePlan(ticks, next_fire_at + behind * self.every, skipped=first)
        zone = ZoneInfo(self.timezone or "UTC")
        # walk back from now: the latest due ticks, never before next_fire_at
        after_now = now.replace(tzinfo=timezone.utc).astimezone(zone) + timedelta(microseconds=1)
        back = croniter(self.cron_expression, after_now)
        latest: list[datetime] = []
        while len(latest) < keep:
            tick = _naive_utc(back.get_prev(datetime))
            if tick < next_fire_at:
                break
            latest.append(tick)
        if not latest:  # next_fire_at is not on the expression (it changed): fire once
            latest.append(next_fire_at)
        oldest_kept = latest[-1]
        skipped = 1 if oldest_kept > next_fire_at else 0  # at least one dropped
        return FirePlan(latest[::-1], self.next_after(now), skipped=skipped)

    def resumed(self, next_fire_at: datetime, now: datetime) -> datetime:
        """When a schedule resumed at `now` fires next: its first tick after now, on
        the same grid (a pause does not move an interval's phase), without the ticks
        it missed while paused."""
        if next_fire_at > now:
            return next_fire_at
        if self.every is not None:
            return next_fire_at + ((now - next_fire_at) // self.every + 1) * self.every
        return self.next_after(now)


@dataclass(frozen=True)
class FirePlan:
    #: the tick times to publish, oldest first
    ticks: list[datetime]
    #: next_fire_at after these
    next_fire_at: datetime
    #: due ticks left out by the missed-tick policy (for cron, 1 means "some")
    skipped: int


def _naive_utc(value: datetime) -> datetime:
    return value.astimezone(timezone.utc).replace(tzinfo=None)


def checked_every(every: object) -> timedelta:
    if isinstance(every, bool) or not isinstance(every, (int, float, timedelta)):
        msg = f"every must be a timedelta or a number of seconds, got {shown(every)}"
        raise InvalidOptionError(msg)
    value = every if isinstance(every, timedelta) else timedelta(seconds=every)
    if not MIN_EVERY <= value <= MAX_EVERY:
        msg = (
            f"every must be from {MIN_EVERY.total_seconds():g} second to "
            f"{MAX_EVERY.days} days, got {value.total_seconds():g} seconds"
        )
        raise InvalidOptionError(msg)
    return value


def checked_cron(expression: object) -> str:
    if not isinstance(expression, str) or not expression.strip():
        msg = f"cron must be a cron expression such as '*/5 * * * *', got {shown(expression)}"
        raise InvalidOptionError(msg)
    text = " ".join(expression.split())
    fields = len(text.split(" "))
    # 5 fields, or 6 with seconds last (croniter's form); croniter would also take a
    # 7th (years), which a schedule that should keep firing has no use for
    if len(text) > MAX_CRON_LENGTH or fields not in (5, 6) or not croniter.is_valid(text):
        msg = (
            f"cron {shown(expression)} is not a valid cron expression: five fields (minute hour "
            "day-of-month month day-of-week), or six with seconds last"
        )
        raise InvalidOptionError(msg)
    return text


def checked_timezone(name: object) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_TIMEZONE_LENGTH:
        msg = f"timezone must be an IANA time zone name such as 'Europe/Berlin', got {shown(name)}"
        raise InvalidOptionError(msg)
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        msg = f"unknown timezone {shown(name)}: use an IANA name such as 'Europe/Berlin' or 'UTC'"
        raise InvalidOptionError(msg) from None
    return name


def checked_missed(missed: object, limit: object) -> tuple[Missed, int]:
    try:
        policy = Missed(missed)
    except ValueError:
        msg = f"missed must be 'skip' or 'catch_up', got {shown(missed)}"
        raise InvalidOptionError(msg) from None
    if (
        isinstance(limit, bool)
        or not isinstance(limit, int)
        or not 1 <= limit <= MAX_CATCH_UP_LIMIT
    ):
        msg = (
            f"catch_up_limit must be an integer from 1 to {MAX_CATCH_UP_LIMIT}, got {shown(limit)}"
        )
        raise InvalidOptionError(msg)
    return policy, limit
