"""Interval and cron schedules stored in the database (docs/schedules.md)."""

from .declaration import Schedule
from .runner import SCHEDULE_HEADER, TICK_HEADER, ScheduleRunner
from .timing import Missed

__all__ = ["SCHEDULE_HEADER", "TICK_HEADER", "Missed", "Schedule", "ScheduleRunner"]
