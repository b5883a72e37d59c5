"""The schedule table's statements, as the admin API reaches them: they live in the
database layer (`drivers/schedules.py`)."""

from __future__ import annotations

from faststream_sqla.drivers.schedules import (
    ScheduleAdvance,
    advance,
    database_now,
    delete,
    insert,
    load,
    load_one,
    update,
)

__all__ = [
    "ScheduleAdvance",
    "advance",
    "database_now",
    "delete",
    "insert",
    "load",
    "load_one",
    "update",
]
