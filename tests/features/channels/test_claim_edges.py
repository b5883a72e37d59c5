"""The channel claim at its edges: runs of blocked channels, channels with nothing due
or all in flight, a rate tightened by its period, a non-C collation, a queue-level
limit over a plain backlog. Each on the databases it concerns; the comment above each
test says what would go wrong without the rule it checks. The claims are made directly
with `claim_channelled`, as a subscriber's fetcher makes them (one idle worker: limit
1, so a claim reads 9 channels), so each test counts claims, not seconds."""

from __future__ import annotations

import os

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from faststream_sqla import SqlaBroker
from faststream_sqla.channels.claim import claim_channelled
from faststream_sqla.channels.store import set_limits
from faststream_sqla.drivers import Driver, driver_for
from faststream_sqla.migrations import upgrade_schema
from faststream_sqla.schema import QueueTables

from tests.conftest import PG_SERVER, on_servers



async def claim(driver: Driver, engine: AsyncEngine, limit: int = 1) -> list[str | None]:
    """The channels of the messages one claim of queue "work" takes."""
    return [m.channel for m in await claim_channelled(driver, engine, "work", limit)]


async def claims_until(
    driver: Driver, engine: AsyncEngine, wanted: str, at_most: int
) -> list[list[str | None]]:
    """Up to `at_most` claims of one message, stopping at the first that takes
    `wanted`; what each took. A claim that takes nothing costs a subscriber
    `max_fetch_interval` (1 s by default) before it claims again."""
    taken: list[list[str | None]] = []
    for _ in range(at_most):
        taken.append(await claim(driver, engine))
        if wanted in taken[-1]:
            break
    return taken


# Without the rule, the rotation would only move past
# blocked channels when *nothing* can be claimed. When the N + 8 channels after the
# rotation are all full (paused, at max_concurrency, out of rate) but a channel of the
# wrapped round (or PLAIN) has room, that one is served and becomes the rotation again,
# so the next claim reads the same N + 8 blocked channels and the channels named after
# them are never read: a small channel starves behind a big one for as long as the
# blocked run lasts. docs/flow-control.md promises "a run of k blocked channels delays
# the channels after it by about k / (N + 8) claims".
# The same with messages without a channel in place of channel "a": without the rule PLAIN
# takes its turn, the rotation goes back to "" and the first N + 8 channels by name,
# all blocked, are all any claim reads.
@pytest.mark.parametrize(
    "busy", ["a", None], ids=["while-an-earlier-channel-has-room", "while-plain-messages-wait"]
)
async def test_channels_after_a_blocked_run_get_a_turn(database_url, engine, driver, busy):
    for i in range(1, 10):
        await set_limits(driver, engine, "work", f"b{i}", max_concurrency=1)
    async with SqlaBroker(database_url) as broker:
        for i in range(1, 10):
            await broker.publish_batch("held", "ready", queue="work", channel=f"b{i}")
        # one message of each b taken and held: each b is at its limit from now on
        assert sorted(await claim(driver, engine, 9)) == [f"b{i}" for i in range(1, 10)]
        await broker.publish_batch(*range(50), queue="work", channel=busy)
        # the round wraps: the rotation is "a" (or, for PLAIN's turn, "")
        assert await claim(driver, engine) == [busy]
        await broker.publish("late", queue="work", channel="z")
    taken = await claims_until(driver, engine, "z", at_most=30)
    # Fair would be the next claim or the one after; the busy one keeps every turn instead.
    assert ["z"] in taken[:3], taken


# Without the rule, the walk would find channels with *ready* messages (PENDING or
# RETRYABLE), due or not, and the plan would give each a share; the take then finds none of them due. Those shares use up the
# claim (its limit, the queue's room) and move the rotation, so a claim for one idle
# worker passes over a single not-yet-due channel and takes nothing, and a due channel
# named after k channels with only delayed messages (reminders scheduled per tenant,
# retries in backoff) waits about k claims, each of which a subscriber follows with
# max_fetch_interval of idling. The shares also charge rate windows for claims that
# never happened.
async def test_channels_with_nothing_due_do_not_use_up_the_claims(
    database_url, engine, driver
):
    async with SqlaBroker(database_url) as broker:
        for i in range(30):
            await broker.publish("later", queue="work", channel=f"d{i:02}", delay=3600)
        await broker.publish("due", queue="work", channel="z")
    taken = await claims_until(driver, engine, "z", at_most=40)
    # The only due message is z's. Channels with nothing due get no share, and claims
    # that find only those move the rotation past them: 30 of them, 9 a claim.
    assert ["z"] in taken[:6], taken


# MariaDB/MySQL only: there
# the channels come from the keys table, which holds every live channelled message,
# in flight too. A channel whose messages are all in flight and that has no
# max_concurrency (room None) is given a share like any other and yields nothing, so a
# run of busy channels after the rotation absorbs the claims of idle workers while a
# later channel has a ready message. PostgreSQL and SQLite read only ready messages
# and take z at once.
@pytest.mark.parametrize("dialect_name", on_servers("mysql"))
async def test_mysql_channels_whose_messages_are_all_in_flight_do_not_use_up_the_claims(
    database_url, engine, driver
):
    async with SqlaBroker(database_url) as broker:
        for i in range(30):
            await broker.publish("busy", queue="work", channel=f"c{i:02}")
        assert len(await claim(driver, engine, 30)) == 30  # all in flight; rotation c29
        await broker.publish_batch("a1", "a2", queue="work", channel="a")
        assert await claim(driver, engine) == ["a"]  # the round wraps: rotation "a"
        await broker.publish("ready", queue="work", channel="z")
    taken = await claims_until(driver, engine, "z", at_most=40)
    assert ["z"] in taken[:6], taken  # past 30 busy channels, 9 a claim


# Without the rule, a changed period would discard the stored window ("stored_slot > slot" or shift > SLOTS
# gives an empty window), so tightening "5/s" to "5/min" lets a second full burst start
# at once: 10 claims inside one minute under a rate of 5 a minute. docs/flow-control.md
# promises that a rate holds in any window and that changes apply from the next claim.
async def test_a_rate_made_stricter_by_its_period_allows_no_second_burst(
    database_url, engine, driver
):
    await set_limits(driver, engine, "work", "r", rate="5/s")
    async with SqlaBroker(database_url) as broker:
        await broker.publish_batch(*range(20), queue="work", channel="r")
    first = await claim(driver, engine, 10)
    assert len(first) == 5
    await set_limits(driver, engine, "work", "r", rate="5/min")
    second = await claim(driver, engine, 10)
    # the 5 claimed a moment ago are within the last minute: nothing more may start
    assert second == [], f"{len(first) + len(second)} claims within a minute at 5/min"


# PostgreSQL with a database collation other than C: the database orders the channels
# by the column's collation (`channel > :rotation`, min(channel)); a plan that decided
# which channels of the wrapped round come "up to the rotation" with Python's code-point
# comparison
# (`row["channel"] <= rotation`). Under en-US (the default of many installations and of
# the official Docker image) "a" < "B" in the database but "B" < "a" in Python: once
# the rotation is "B", no channel follows it in the database and "a" is never taken
# into the wrapped round, so channel "a" starves for as long as "B" has messages.
@pytest.mark.databases("postgresql")
async def test_postgresql_rotation_under_a_non_c_collation_serves_every_channel(
    server_databases,
):
    name = f"{os.environ.get('FSQLA_DB_PREFIX', 'fsqla')}_icu_en_us"
    server_databases["postgresql"]  # the server is configured and answers
    admin = create_async_engine(f"{PG_SERVER}/postgres", isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}"')
        await conn.exec_driver_sql(
            f'CREATE DATABASE "{name}" TEMPLATE template0 LOCALE_PROVIDER icu '
            "ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
        )
    url = f"{PG_SERVER}/{name}"
    engine = create_async_engine(url)
    try:
        await upgrade_schema(engine)
        driver = driver_for(engine, QueueTables())
        driver.configure_engine(engine, owned=False)
        await driver.prepare(engine)
        async with engine.connect() as conn:  # the database orders as en-US does
            assert await conn.scalar(sa.text("SELECT 'a' < 'B'")) is True
        async with SqlaBroker(url) as broker:
            await broker.publish_batch(*range(10), queue="work", channel="a")
            await broker.publish_batch(*range(10), queue="work", channel="B")
        taken: list[str | None] = []
        for _ in range(9):
            taken += await claim(driver, engine)
        # round robin: the two channels alternate
        assert taken.count("a") >= 3, taken
    finally:
        await engine.dispose()
        async with admin.connect() as conn:
            await conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}"')
        await admin.dispose()


# Without the rule, a queue with only a
# queue-level limit (no channel at all) goes to the channel claim, whose branch for
# the messages without a channel orders by (priority DESC, next_attempt_at, id) in one
# range, which no index gives: every claim reads and sorts the queue's whole plain
# backlog to take a few (the plain claim reads one range per priority and stops at its
# limit), at a cost that grows with the backlog. Shown here on PostgreSQL by the rows
# the plan reads.
@pytest.mark.parametrize("dialect_name", on_servers("postgresql"))
async def test_a_queue_limit_does_not_make_each_claim_read_the_whole_plain_backlog(
    database_url, engine, driver
):
    import datetime
    import json

    async with SqlaBroker(database_url) as broker:
        for start in range(0, 5000, 1000):
            await broker.publish_batch(*range(start, start + 1000), queue="work")
    await set_limits(driver, engine, "work", max_concurrency=1000)
    # the PLAIN branch of the channel claim, as a claim for 8 idle workers runs it
    branch = driver.channel_claim._branch(None).params(
        ch_queue="work",
        take_plain=8,
        claim_queue="work",
        claim_limit=8,
        now=datetime.datetime(2100, 1, 1),
    )
    sql = str(branch.compile(dialect=engine.dialect, compile_kwargs={"literal_binds": True}))
    async with engine.connect() as conn:
        plan = (await conn.exec_driver_sql(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")).scalar()
    if isinstance(plan, str):
        plan = json.loads(plan)

    def read(node: dict) -> int:
        own = node.get("Actual Rows", 0) if "Scan" in node["Node Type"] else 0
        return own + sum(read(child) for child in node.get("Plans", []))

    rows_read = read(plan[0]["Plan"])
    assert rows_read <= 100, f"the claim of 8 read {rows_read} rows"
