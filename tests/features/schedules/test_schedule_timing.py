"""When schedules fire: next ticks, the missed-tick policy, resuming, time zones
(faststream_sqla.schedules.timing, pure functions; times are naive UTC)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from faststream_sqla import InvalidOptionError, Schedule
from faststream_sqla.schedules.timing import Kind, Missed, Timing


def cron(expression: str, tz: str = "UTC") -> Timing:
    return Timing.of(None, expression, tz)


def test_interval_next_is_one_interval_on() -> None:
    timing = Timing.of(timedelta(minutes=5), None, None)
    assert timing.kind is Kind.INTERVAL and timing.every_seconds == 300
    assert timing.next_after(datetime(2026, 1, 1, 12, 0, 7)) == datetime(2026, 1, 1, 12, 5, 7)


def test_cron_next_is_strictly_after() -> None:
    timing = cron("*/15 * * * *")
    assert timing.next_after(datetime(2026, 1, 1, 12, 0, 0)) == datetime(2026, 1, 1, 12, 15)
    assert timing.next_after(datetime(2026, 1, 1, 12, 7, 30)) == datetime(2026, 1, 1, 12, 15)


def test_cron_seconds_field_is_last() -> None:
    timing = cron("* * * * * */10")
    assert timing.next_after(datetime(2026, 1, 1, 12, 0, 3)) == datetime(2026, 1, 1, 12, 0, 10)


def test_cron_reads_the_time_zone_across_daylight_saving() -> None:
    nine_in_berlin = cron("0 9 * * *", "Europe/Berlin")
    # winter: UTC+1; summer (from 29 March 2026): UTC+2
    assert nine_in_berlin.next_after(datetime(2026, 3, 27, 12)) == datetime(2026, 3, 28, 8)
    assert nine_in_berlin.next_after(datetime(2026, 3, 28, 12)) == datetime(2026, 3, 29, 7)
    assert cron("0 9 * * *").next_after(datetime(2026, 3, 28, 12)) == datetime(2026, 3, 29, 9)


def test_interval_skip_fires_the_latest_due_tick() -> None:
    timing = Timing.of(60, None, None)
    due = datetime(2026, 1, 1, 12, 0)
    plan = timing.due(due, due + timedelta(minutes=10, seconds=30), Missed.SKIP, 5)
    assert plan.ticks == [due + timedelta(minutes=10)]
    assert plan.next_fire_at == due + timedelta(minutes=11)
    assert plan.skipped == 10


def test_interval_catch_up_fires_the_latest_up_to_the_limit() -> None:
    timing = Timing.of(60, None, None)
    due = datetime(2026, 1, 1, 12, 0)
    plan = timing.due(due, due + timedelta(minutes=10, seconds=30), Missed.CATCH_UP, 3)
    assert plan.ticks == [due + timedelta(minutes=m) for m in (8, 9, 10)]
    assert plan.next_fire_at == due + timedelta(minutes=11)
    assert plan.skipped == 8
    # within the limit nothing is dropped
    short = timing.due(due, due + timedelta(minutes=1), Missed.CATCH_UP, 3)
    assert short.ticks == [due, due + timedelta(minutes=1)] and short.skipped == 0


def test_a_tick_on_time_fires_alone() -> None:
    timing = Timing.of(1, None, None)
    due = datetime(2026, 1, 1, 12, 0, 0, 250_000)
    plan = timing.due(due, due + timedelta(milliseconds=3), Missed.SKIP, 10)
    assert plan.ticks == [due] and plan.skipped == 0
    assert plan.next_fire_at == due + timedelta(seconds=1)


def test_a_long_downtime_costs_only_the_ticks_fired() -> None:
    # a year of one-second ticks: the plan is computed, not walked
    timing = Timing.of(1, None, None)
    due = datetime(2025, 1, 1)
    plan = timing.due(due, due + timedelta(days=365), Missed.CATCH_UP, 2)
    assert plan.ticks == [due + timedelta(days=365, seconds=-1), due + timedelta(days=365)]
    every_second = cron("* * * * * *")
    plan = every_second.due(due, due + timedelta(days=365), Missed.CATCH_UP, 2)
    assert plan.ticks == [due + timedelta(days=365, seconds=-1), due + timedelta(days=365)]
    assert plan.next_fire_at == due + timedelta(days=365, seconds=1)


def test_cron_catch_up_and_skip() -> None:
    hourly = cron("0 * * * *")
    due = datetime(2026, 1, 1, 1, 0)
    now = datetime(2026, 1, 1, 5, 20)
    assert hourly.due(due, now, Missed.CATCH_UP, 10).ticks == [
        datetime(2026, 1, 1, h) for h in (1, 2, 3, 4, 5)
    ]
    skip = hourly.due(due, now, Missed.SKIP, 10)
    assert skip.ticks == [datetime(2026, 1, 1, 5)] and skip.skipped
    assert skip.next_fire_at == datetime(2026, 1, 1, 6)


def test_resume_keeps_the_interval_grid_and_drops_missed_ticks() -> None:
    timing = Timing.of(60, None, None)
    due = datetime(2026, 1, 1, 12, 0, 10)
    assert timing.resumed(due, datetime(2026, 1, 1, 12, 30, 0)) == datetime(2026, 1, 1, 12, 30, 10)
    assert timing.resumed(due, datetime(2026, 1, 1, 12, 30, 10)) == datetime(2026, 1, 1, 12, 31, 10)
    assert timing.resumed(due, datetime(2026, 1, 1, 11, 0)) == due  # not yet due: unchanged
    assert cron("0 * * * *").resumed(due, datetime(2026, 1, 1, 14, 5)) == datetime(2026, 1, 1, 15)


def test_stored_timing_equals_the_declared_one() -> None:
    declared = Schedule(every=timedelta(seconds=90), queue="q").timing
    assert Timing.stored("interval", 90.0, None, None) == declared
    declared = Schedule(cron="0  3 * * *", queue="q").timing  # spacing normalised
    assert declared.cron == "0 3 * * *" and declared.timezone == "UTC"
    assert Timing.stored("cron", None, "0 3 * * *", "UTC") == declared


@pytest.mark.parametrize(
    ("given", "complaint"),
    [
        ({"every": 3650 * 86400 + 1}, "every must be from 1 second to 3650 days"),
        ({"every": True}, "every must be a timedelta"),
        ({"cron": "* * * * * * 2030"}, "not a valid cron expression"),
        ({"cron": ""}, "cron must be a cron expression"),
        ({"cron": "* * * * *", "timezone": ""}, "timezone must be an IANA"),
        ({"every": 5, "headers": {1: "x"}}, "header names must be strings"),
        ({"every": 5, "ttl": -1}, "ttl"),
        ({"every": 5, "queue": ""}, "queue name must not be empty"),
        ({"every": 5, "catch_up_limit": 1001}, "catch_up_limit must be an integer from 1 to 1000"),
    ],
)
def test_bad_schedules(given: dict, complaint: str) -> None:
    with pytest.raises(InvalidOptionError, match=complaint):
        Schedule(**given)
