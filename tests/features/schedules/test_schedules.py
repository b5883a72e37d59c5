"""Interval and cron schedules on every database: firing, the missed-tick policy after a
downtime, restarts, pause/resume/delete through the admin API and the CLI, bad input,
and three processes sharing one schedule."""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from faststream_sqla import (
    InvalidOptionError,
    Schedule,
    SqlaBroker,
    SqlaMessage,
    UnknownScheduleError,
)
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.drivers.probe import database_now
from faststream_sqla.schedules import SCHEDULE_HEADER, TICK_HEADER
from faststream_sqla.schema import QueueTables
from tests.support.cli import cli, cli_json
from tests.support.helpers import (
    FAST,
    CuttableDatabase,
    Recorder,
    captured_logger,
    one_handled,
    recording,
    rows,
    wait_until,
)
from tests.support.processes import WORKERS, read_line, run_until, started_together


def tick_of(headers: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(headers[TICK_HEADER])


async def schedule_row(engine: AsyncEngine, tables: QueueTables, name: str) -> sa.RowMapping:
    async with engine.connect() as conn:
        found = await conn.execute(sa.select(tables.schedule).where(tables.schedule.c.name == name))
        return found.mappings().one()


async def published(engine: AsyncEngine, tables: QueueTables, queue: str) -> list[dict[str, Any]]:
    """Headers of the messages in `queue` (not consumed), in publish order."""
    found = await rows(engine, tables.message, tables.message.c.queue == queue)
    return [h if isinstance(h := r["headers"], dict) else json.loads(h) for r in found]


async def fired_at_least(engine: AsyncEngine, tables: QueueTables, name: str, n: int) -> None:
    async def enough() -> bool:
        return (await schedule_row(engine, tables, name))["fired_count"] >= n

    await wait_until(enough, timeout=30)


async def test_interval_schedule_fires_each_tick_to_its_subscriber(
    database_url, engine, tables
):
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber(
        "reports", **FAST,
        # catch_up: a late tick on a busy host is fired, not skipped (the grid check below)
        schedule=Schedule(
            every=timedelta(seconds=1), body={"report": "daily"}, priority=7,
            missed="catch_up", catch_up_limit=100,
        ),
    )
    async def handle(body: dict, msg: SqlaMessage) -> None:
        got.record((body, msg.priority, msg.headers))

    async with broker:
        await broker.start()
        calls = await got.wait_for(3)
        runner = broker.schedule_runner
        assert runner is not None

        # the runner counts a tick after its commit returns; the handler can see the
        # tick first, since the commit's NOTIFY wakes the subscriber
        async def counted() -> bool:
            return runner.fired["reports"] >= 3

        await wait_until(counted, timeout=30)
    bodies = {json.dumps(body) for body, _, _ in calls}
    assert bodies == {'{"report": "daily"}'}
    assert {priority for _, priority, _ in calls} == {7}
    assert {headers[SCHEDULE_HEADER] for _, _, headers in calls} == {"reports"}
    ticks = sorted(tick_of(headers) for _, _, headers in calls)
    # one interval apart, on the grid the first declaration set
    assert [b - a for a, b in zip(ticks, ticks[1:])] == [timedelta(seconds=1)] * (len(ticks) - 1)
    row = await schedule_row(engine, tables, "reports")
    assert row["kind"] == "interval" and row["every_seconds"] == 1.0
    assert row["fired_count"] >= 3 and row["paused"] in (False, 0)
    assert row["next_fire_at"] > row["last_fired_at"]


async def test_cron_schedule_fires_on_its_seconds(database_url, engine, tables):
    async with SqlaBroker(database_url) as broker:
        # six fields: seconds last (croniter's form); every even second, Berlin time
        broker.schedule("beats", "beat", cron="* * * * * */2", timezone="Europe/Berlin")
        await broker.start()
        await fired_at_least(engine, tables, "beats", 2)
    ticks = [tick_of(h) for h in await published(engine, tables, "beats")]
    assert len(ticks) >= 2
    assert all(t.microsecond == 0 and t.second % 2 == 0 for t in ticks)
    assert [b - a for a, b in zip(ticks, ticks[1:])] == [timedelta(seconds=2)] * (len(ticks) - 1)
    row = await schedule_row(engine, tables, "beats")
    assert (row["kind"], row["cron"], row["timezone"]) == ("cron", "* * * * * */2", "Europe/Berlin")


async def test_a_broker_without_schedules_starts_no_runner(make_broker):
    broker = make_broker()
    got = recording(broker, "plain")

    async with one_handled(broker, got, "x", queue="plain"):
        assert broker.schedule_runner is None
        names = {task.get_name() for task in asyncio.all_tasks()}
        assert "faststream-sqla schedules" not in names


@pytest.mark.parametrize(
    ("missed", "fired_ticks"),
    [("skip", [10]), ("catch_up", [7, 8, 9, 10])],
)
async def test_missed_ticks_after_a_downtime(
    database_url, engine, tables, missed, fired_ticks
):
    def declare(broker: SqlaBroker) -> None:
        broker.schedule("hourly", "work", every=timedelta(minutes=1), missed=missed,
                        catch_up_limit=4)

    first = SqlaBroker(database_url)
    declare(first)
    async with first:
        await first.start()  # writes the schedule; due in a minute
    assert await published(engine, tables, "hourly") == []

    # everything was down for ten and a half minutes: ticks 0..10 fell due meanwhile
    async with engine.begin() as conn:
        now = await database_now(conn)
        due = (now - timedelta(minutes=10, seconds=30)).replace(microsecond=0)
        await conn.execute(sa.update(tables.schedule).values(next_fire_at=due))

    logger, lines = captured_logger(f"schedules-missed-{missed}")
    second = SqlaBroker(database_url, logger=logger)
    declare(second)
    async with second:
        await second.start()
        await fired_at_least(engine, tables, "hourly", len(fired_ticks))
    ticks = [tick_of(h).replace(tzinfo=None) for h in await published(engine, tables, "hourly")]
    assert ticks == [due + timedelta(minutes=k) for k in fired_ticks]
    row = await schedule_row(engine, tables, "hourly")
    assert row["fired_count"] == len(fired_ticks)
    assert row["next_fire_at"] == due + timedelta(minutes=11)  # the grid is kept
    assert row["last_fired_at"] == due + timedelta(minutes=10)
    assert lines.containing("were skipped"), lines.messages()


async def test_pause_resume_and_delete_through_the_api(database_url, engine, tables):
    async with SqlaBroker(database_url) as broker:
        broker.schedule("paused-q", "a", every=1, name="a")
        broker.schedule("witness-q", "w", every=1, name="witness")
        await broker.start()
        await fired_at_least(engine, tables, "a", 1)
        async with QueueAdmin(engine) as admin:
            paused = await admin.pause_schedule("a")
            assert paused.paused
            before = len(await published(engine, tables, "paused-q"))
            witnessed = (await schedule_row(engine, tables, "witness"))["fired_count"]
            # the runner keeps firing the other schedule, and never the paused one
            await fired_at_least(engine, tables, "witness", witnessed + 2)
            assert len(await published(engine, tables, "paused-q")) == before

            resumed = await admin.resume_schedule("a")
            assert not resumed.paused
            async with engine.connect() as conn:
                now = await database_now(conn)
            # the ticks missed while paused are not fired: the next one is ahead
            assert resumed.next_fire_at.replace(tzinfo=None) > now
            await fired_at_least(engine, tables, "a", paused.fired_count + 1)

            listed = {s.name: s for s in await admin.schedules()}
            assert set(listed) == {"a", "witness"}
            assert (listed["a"].queue, listed["a"].kind, listed["a"].payload) == (
                "paused-q", "interval", b"a"
            )
            await admin.delete_schedule("a")
            assert [s.name for s in await admin.schedules()] == ["witness"]
            for call in (admin.pause_schedule, admin.resume_schedule, admin.delete_schedule):
                with pytest.raises(UnknownScheduleError, match="no schedule 'a'"):
                    await call("a")


async def test_a_failed_publish_rolls_the_tick_back_and_holds_no_other_schedule(
    database_url, engine, tables
):
    logger, lines = captured_logger("schedules-full-queue")
    broker = SqlaBroker(database_url, max_queue_sizes={"full": 1}, logger=logger)
    broker.schedule("full", "f", every=1)
    broker.schedule("witness-q", "w", every=1, name="witness")
    async with broker:
        await broker.start()
        await fired_at_least(engine, tables, "full", 1)
        witnessed = (await schedule_row(engine, tables, "witness"))["fired_count"]
        await fired_at_least(engine, tables, "witness", witnessed + 2)
        # the queue is full: each try rolled back, the tick is still due
        row = await schedule_row(engine, tables, "full")
        assert row["fired_count"] == 1 and len(await published(engine, tables, "full")) == 1
        assert lines.containing("queue 'full' is full"), lines.messages()

        async with engine.begin() as conn:  # room again: the tick fires
            await conn.execute(sa.delete(tables.message).where(tables.message.c.queue == "full"))
        await fired_at_least(engine, tables, "full", 2)
    assert len(await published(engine, tables, "full")) == 1


async def test_a_schedule_waits_out_an_outage(database_url, dialect_name, tmp_path):
    database = CuttableDatabase(database_url, dialect_name, tmp_path)
    await database.start()
    logger, lines = captured_logger(f"schedules-outage-{dialect_name}")
    broker = SqlaBroker(database.url, logger=logger)
    broker.schedule("beats", "b", every=1)
    health = broker.config.health
    direct = create_async_engine(database.direct_url)
    tables = QueueTables()
    try:
        async with broker:
            await broker.start()
            await fired_at_least(direct, tables, "beats", 1)
            await database.cut(broker.engine)

            async def lasted_three_probes() -> bool:
                return health.is_down and health.failed_probes >= 3

            await wait_until(lasted_three_probes)
            await database.restore()
            before = (await schedule_row(direct, tables, "beats"))["fired_count"]
            await fired_at_least(direct, tables, "beats", before + 2)
        ticks = [tick_of(h) for h in await published(direct, tables, "beats")]
    finally:
        await direct.dispose()
    assert len(ticks) == len(set(ticks)) >= 3
    # the outage in the log once, its end once; the runner's failures meanwhile are quiet
    assert health.outages == 1
    assert len(lines.containing("lost the database")) == 1
    assert not lines.containing("firing failed") and not lines.containing("failed, trying")


async def test_restart_keeps_the_pause_and_takes_the_new_declaration(
    database_url, engine, tables
):
    async with SqlaBroker(database_url) as first:
        first.schedule("jobs", "v1", every=1, name="job")
        await first.start()
        await fired_at_least(engine, tables, "job", 1)
    async with QueueAdmin(engine) as admin:
        await admin.pause_schedule("job")
    before = await schedule_row(engine, tables, "job")

    # same timing, new body: the row takes the body and keeps its place and pause
    async with SqlaBroker(database_url) as second:
        second.schedule("jobs", "v2", every=1, name="job")
        second.schedule("witness-q", "w", every=1, name="witness")
        await second.start()
        await fired_at_least(engine, tables, "witness", 2)
    after = await schedule_row(engine, tables, "job")
    assert after["paused"] in (True, 1) and bytes(after["payload"]) == b"v2"
    assert after["fired_count"] == before["fired_count"]
    assert after["next_fire_at"] == before["next_fire_at"]
    assert after["created_at"] == before["created_at"]

    # new timing: it fires next by the new timing, still paused
    async with SqlaBroker(database_url) as third:
        third.schedule("jobs", "v2", every=timedelta(hours=1), name="job")
        await third.start()
        async with engine.connect() as conn:
            now = await database_now(conn)
    changed = await schedule_row(engine, tables, "job")
    assert changed["every_seconds"] == 3600.0 and changed["paused"] in (True, 1)
    assert now + timedelta(minutes=59) < changed["next_fire_at"] <= now + timedelta(hours=1)


async def test_schedule_commands(database_url, engine, tables):
    async with SqlaBroker(database_url) as broker:
        broker.schedule("nightly-q", "n", cron="0 3 * * *", timezone="Europe/Berlin",
                        name="nightly", missed="catch_up", catch_up_limit=3)
        await broker.start()

    (listed,) = await cli_json(database_url, "schedule", "list")
    assert (listed["name"], listed["queue"], listed["cron"], listed["timezone"]) == (
        "nightly", "nightly-q", "0 3 * * *", "Europe/Berlin"
    )
    assert (listed["missed"], listed["catch_up_limit"], listed["paused"]) == ("catch_up", 3, False)
    assert listed["payload_text"] == "n"
    next_fire = datetime.fromisoformat(listed["next_fire_at"])
    assert next_fire.astimezone(timezone.utc).minute == 0  # 03:00 Berlin is 01:00 or 02:00 UTC

    human = (await cli(database_url, "schedule", "list")).stdout
    assert "nightly" in human and "active" in human and "cron 0 3 * * *" in human

    assert (await cli_json(database_url, "schedule", "pause", "nightly"))["paused"] is True
    assert "paused" in (await cli(database_url, "schedule", "list")).stdout
    assert (await cli_json(database_url, "schedule", "resume", "nightly"))["paused"] is False
    assert "Schedule nightly paused." in (
        await cli(database_url, "schedule", "pause", "nightly")
    ).stdout
    assert "Schedule nightly resumed; next firing" in (
        await cli(database_url, "schedule", "resume", "nightly")
    ).stdout

    refused = await cli(database_url, "schedule", "delete", "nightly", code=1, input="n\n")
    assert "Aborted" in refused.output
    assert await cli_json(database_url, "schedule", "delete", "nightly", "--yes") == {
        "deleted": "nightly"
    }
    assert await cli_json(database_url, "schedule", "list") == []
    assert "No schedules." in (await cli(database_url, "schedule", "list")).stdout
    missing = await cli(database_url, "schedule", "pause", "nightly", code=1)
    assert "no schedule 'nightly'" in missing.output


@pytest.mark.parametrize(
    ("declaration", "complaint"),
    [
        ({"every": 1, "cron": "* * * * *"}, "exactly one of every="),
        ({}, "exactly one of every="),
        ({"every": 0}, "every must be from 1 second"),
        ({"every": timedelta(milliseconds=500)}, "every must be from 1 second"),
        ({"every": -5}, "every must be from 1 second"),
        ({"every": "5"}, "every must be a timedelta"),
        ({"cron": "61 * * * *"}, "not a valid cron expression"),
        ({"cron": "* * * *"}, "not a valid cron expression"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "unknown timezone 'Mars/Olympus'"),
        ({"every": 5, "timezone": "UTC"}, "timezone= applies to cron schedules only"),
        ({"every": 5, "missed": "later"}, "missed must be 'skip' or 'catch_up'"),
        ({"every": 5, "missed": "catch_up", "catch_up_limit": 0}, "catch_up_limit must be"),
        ({"every": 5, "priority": 11}, "priority must be from 0 to 10"),
        ({"every": 5, "name": "n" * 201}, "the limit is 200"),
    ],
)
async def test_bad_declarations_are_refused_before_anything_is_written(
    database_url, engine, tables, declaration, complaint
):
    broker = SqlaBroker(database_url)
    with pytest.raises(InvalidOptionError, match=complaint):
        broker.schedule("q", "body", **declaration)
    async with broker:
        await broker.start()
        assert broker.schedule_runner is None
    async with engine.connect() as conn:
        assert await conn.scalar(sa.select(sa.func.count()).select_from(tables.schedule)) == 0


def test_two_schedules_of_one_queue_need_names() -> None:
    broker = SqlaBroker("sqlite+aiosqlite:///unused.db")
    broker.schedule("q", "a", every=5)
    with pytest.raises(InvalidOptionError, match="'q' is declared twice"):
        broker.schedule("q", "b", every=10)
    broker.schedule("q", "b", every=10, name="q-slow")
    with pytest.raises(InvalidOptionError, match="one queue"):
        broker.subscriber(["q", "r"], schedule=Schedule(every=5, name="both"))
    assert [s.key for s in broker.schedules] == ["q", "q-slow"]


@pytest.mark.slow
async def test_three_processes_fire_each_tick_exactly_once(database_url, engine, tables, tmp_path):
    workers = 3
    logs = [tmp_path / f"scheduler-{i}.log" for i in range(workers)]
    argv = (sys.executable, WORKERS / "scheduler.py", database_url)
    async with started_together([argv] * workers, logs) as procs:

        async def ten_ticks() -> bool:
            async with engine.connect() as conn:
                count = await conn.scalar(
                    sa.select(tables.schedule.c.fired_count).where(tables.schedule.c.name == "tick")
                )
            return (count or 0) >= 10

        await run_until(procs, logs, ten_ticks)
        fired_by = [
            int((await read_line(p, log)).removeprefix("FIRED ")) for p, log in zip(procs, logs)
        ]
    print("ticks fired by each process:", fired_by)
    ticks = [tick_of(h) for h in await published(engine, tables, "ticks")]
    row = await schedule_row(engine, tables, "tick")
    assert len(ticks) == row["fired_count"] == sum(fired_by) >= 10
    assert [t for t, n in Counter(ticks).items() if n > 1] == [], "a tick fired twice"
    ordered = sorted(ticks)
    gaps = [b - a for a, b in zip(ordered, ordered[1:])]
    assert gaps == [timedelta(seconds=1)] * (len(ticks) - 1), "a tick was never fired"


def test_router_schedules_take_the_prefix() -> None:
    from faststream_sqla import SqlaRouter

    router = SqlaRouter(prefix="billing.")
    router.schedule("invoices", "run", every=60)
    broker = SqlaBroker("sqlite+aiosqlite:///unused.db")
    broker.include_router(router)
    (declared,) = broker.schedules
    assert (declared.key, declared.queue) == ("billing.invoices", "billing.invoices")
