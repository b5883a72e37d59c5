"""Hostile and mistaken input gets one typed error, the same on every database, before
anything is written, and never breaks the caller's transaction."""

from __future__ import annotations

import asyncio
import math
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from typer.testing import CliRunner

from faststream_sqla import (
    InvalidOptionError,
    InvalidQueueNameError,
    MessageSerializationError,
    Schedule,
    SqlaBroker,
)
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.cli import app
from faststream_sqla.exceptions import SqlaBrokerError
from faststream_sqla.subscriber.config import ConsumeOptions
from tests.support.helpers import recording, rows

EAST_OF_UTC = timezone(timedelta(hours=-5))


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"headers": {"n": math.nan}}, MessageSerializationError),
        ({"headers": {"n": math.inf}}, MessageSerializationError),
        ({"headers": 5}, InvalidOptionError),
        ({"headers": "abc"}, InvalidOptionError),
        ({"headers": {1: "integer name"}}, InvalidOptionError),
        ({"headers": {"reply-to": ""}}, InvalidQueueNameError),
        ({"correlation_id": "a\x00b"}, InvalidOptionError),
        ({"next_attempt_at": datetime.max.replace(tzinfo=EAST_OF_UTC)}, InvalidOptionError),
    ],
    ids=["nan", "infinity", "int headers", "str headers", "int name", "reply-to", "nul",
         "overflow"],
)
async def test_bad_publish_input_is_a_typed_error_and_the_transaction_survives(
    database_url, engine, tables, business_table, options, error
):
    business = business_table
    broker = SqlaBroker(database_url)
    async with broker:
        await broker.connect()
        with pytest.raises(error):
            await broker.publish("x", queue="q", **options)
        async with AsyncSession(engine) as session:  # the outbox: the caller's work goes on
            await session.execute(business.insert().values(id=1))
            with pytest.raises(error):
                await broker.publish("x", queue="q", connection=session, **options)
            await session.commit()
    async with engine.connect() as conn:
        assert (await conn.execute(sa.select(business.c.id))).scalars().all() == [1]
    assert await rows(engine, tables.message) == []


async def test_a_content_type_the_caller_gives_is_kept(make_broker, engine, tables):
    broker = make_broker()
    got = recording(broker, "q", body=bytes, record=lambda body, msg: msg.content_type)

    async with broker:
        await broker.start()
        await broker.publish(b"<a/>", queue="q", headers={"content-type": "application/xml"})
        assert await got.wait_for(1) == ["application/xml"]


@pytest.mark.parametrize(
    "option",
    [
        {"fetch_batch_size": 2**31},
        {"max_fetch_batch_size": 2**31},
        {"release_stuck_timeout": 1e12},
        {"release_stuck_interval": 1e-9},
        {"flush_interval": 1e300},
        {"max_workers": 10**6},
        {"overfetch_factor": 1e9},
        {"max_fetch_interval": math.inf},
        {"max_deliveries": 2**40},
    ],
    ids=lambda option: next(iter(option)),
)
def test_options_that_cannot_work_are_refused_when_the_subscriber_is_built(option):
    with pytest.raises(InvalidOptionError, match=next(iter(option))):
        ConsumeOptions(**option)
    broker = SqlaBroker("sqlite+aiosqlite:///:memory:")
    with pytest.raises(InvalidOptionError):
        broker.subscriber("q", **option)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("graceful_timeout", -1),
        ("graceful_timeout", math.inf),
        ("graceful_timeout", math.nan),
        ("graceful_timeout", "15"),
        ("engine_options", "pool_size=5"),
        ("log_level", "INFO"),
        ("log_level", True),
        ("validate_schema", "no"),
        ("vacuum_message_table", "off"),
        ("cross_process_wakeups", "yes"),
    ],
    ids=lambda value: repr(value),
)
def test_broker_options_that_cannot_work_are_refused_when_it_is_built(option, value):
    with pytest.raises(InvalidOptionError, match=option):
        SqlaBroker("sqlite+aiosqlite:///:memory:", **{option: value})


def test_a_publishers_headers_must_be_a_dict():
    broker = SqlaBroker("sqlite+aiosqlite:///:memory:")
    with pytest.raises(InvalidOptionError, match="headers"):
        broker.publisher("q", headers="tenant=acme")  # type: ignore[arg-type]


def test_the_broker_options_bounds_are_inclusive():
    for value in (None, 0, 0.1, 7 * 86400):
        assert SqlaBroker("sqlite+aiosqlite:///:memory:", graceful_timeout=value)


BAD_URL = "postgresql+asyncpg://postgres:SeCrEt@127.0.0.1:59x9/x"


def test_a_malformed_url_never_shows_its_password():
    with pytest.raises(InvalidOptionError) as info:
        SqlaBroker(BAD_URL)
    assert "SeCrEt" not in str(info.value) and "***" in str(info.value)
    result = CliRunner().invoke(app, ["db", "current", "--url", BAD_URL])
    assert result.exit_code == 1
    assert "SeCrEt" not in result.output and "Traceback" not in result.output
    assert "not a database URL" in result.output


# -- numbers in other scripts' digits -----------------------------------------------
# int(), float() and a regex's \d take them (a fullwidth 5 is 5): a rate typed as
# "\uff15/s" would be stored as 5/s. Only the ASCII digits 0-9 are numbers; anything else is the option's
# usual error, and nothing is written.

FIVE = "\uff15"  # FULLWIDTH DIGIT FIVE

NOT_ASCII = [
    (["channel", "set", "a", "--queue", "q", "--rate", f"{FIVE}/s"], "must look like"),
    (["channel", "set", "a", "--queue", "q", "--rate", f"5/{FIVE}s"], "period must be"),
    (["channel", "set", "a", "--queue", "q", "--max-concurrency", FIVE], "not a whole"),
    (["channel", "set", "a", "--queue", "q", "--max-concurrency", "\u00b2"], "not a whole"),
    (["queue", "limit", "q", "--channel-rate", "\u0663/min"], "must look like"),
    (["queue", "limit", "q", "--max-concurrency", FIVE], "not a whole"),
    (["publish", "q", "x", "--priority", FIVE], "not a whole number (digits 0-9)"),
    (["publish", "q", "x", "--delay", f"{FIVE}s"], "--delay must be seconds"),
    (["publish", "q", "x", "--ttl", FIVE], "--ttl must be seconds"),
    (["inspect", FIVE], "not a whole number (digits 0-9)"),
    (["dlq", "redrive", FIVE], "not a whole number (digits 0-9)"),
    (["dlq", "list", "--limit", FIVE], "not a whole number (digits 0-9)"),
    (["dlq", "list", "--since", f"{FIVE}h"], "neither an ISO 8601 time nor an age"),
    (["archive", "prune", "--older-than", f"{FIVE}d", "--yes"], "not a duration"),
    (["archive", "prune", "--older-than", "5d", "--batch-size", FIVE], "not a whole"),
]


@pytest.mark.parametrize(
    ("args", "expected"), NOT_ASCII, ids=[" ".join(args) for args, _ in NOT_ASCII]
)
async def test_the_cli_takes_numbers_in_ascii_digits_only(
    database_url, engine, tables, args, expected
):
    result = await asyncio.to_thread(CliRunner().invoke, app, [*args, "--url", database_url])
    assert result.exit_code == 2, result.output
    assert expected in " ".join(result.output.split()), result.output  # click's box wraps
    assert "Traceback" not in result.output
    async with engine.connect() as conn:
        for table in (tables.controls, tables.message):
            assert (await conn.execute(sa.select(table))).all() == []


async def test_the_python_api_takes_numbers_in_ascii_digits_only(database_url, engine, tables):
    async with QueueAdmin(engine) as admin:
        for call, error in [
            (lambda: admin.set_channel_limits("q", "a", rate=f"{FIVE}/s"), "must look like"),
            (lambda: admin.set_channel_limits("q", "a", rate=f"5/{FIVE}s"), "period must be"),
            (lambda: admin.set_channel_limits("q", "a", max_concurrency=FIVE), "whole number"),
            (lambda: admin.set_queue_limits("q", channel_rate="\u0663/min"), "must look like"),
            (lambda: admin.dead_letters(after=f"2024-01-01T00:00:00,{FIVE}"), "page token"),
        ]:
            with pytest.raises(InvalidOptionError, match=error):
                await call()
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        for options, error in [
            ({"priority": FIVE}, "priority must be an integer"),
            ({"delay": f"{FIVE}s"}, "delay must be seconds"),
            ({"ttl": f"1.{FIVE}"}, "ttl must be seconds"),
        ]:
            with pytest.raises(InvalidOptionError, match=error):
                await broker.publish("x", queue="q", **options)
    async with engine.connect() as conn:
        for table in (tables.controls, tables.message):
            assert (await conn.execute(sa.select(table))).all() == []


# -- long values in error messages --------------------------------------------------
# An error echoes at most the first 100 characters of a value, and says how long it
# is: a 10,000-character name would otherwise bury what the error is about.

LONG = "x" * 10_000


def short_and_naming(message: str, problem: str) -> None:
    assert len(message) < 300, message
    assert problem in message, message
    assert "x" * 101 not in message, message


async def test_an_error_about_a_very_long_value_is_short_and_names_the_problem(
    database_url, engine
):
    async with QueueAdmin(engine) as admin:
        for call, problem in [
            (lambda: admin.pause_queue(LONG), "queue name is 10000 characters long"),
            (lambda: admin.pause_queue(LONG[:200] + "\n"), "contains control characters"),
            (lambda: admin.set_channel_limits("q", LONG, rate="1/s"), "1 to 255 characters"),
            (lambda: admin.pause_channel("q", LONG), "1 to 255 characters"),
            (lambda: admin.pause_schedule(LONG), "no schedule 'xxx"),
            (lambda: admin.set_queue_limits("q", rate=LONG), "a rate must look like"),
            (lambda: admin.set_queue_limits("q", rate=f"1/{LONG}"), "period must be seconds"),
            (lambda: admin.dead_letters(after=LONG), "not a page token"),
        ]:
            with pytest.raises(SqlaBrokerError) as info:
                await call()
            short_and_naming(str(info.value), problem)
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        for options, problem in [
            ({"channel": LONG}, "channel must be 1 to 255 characters long, got 10000"),
            ({"ordering_key": LONG}, "ordering_key must be 1 to 255"),
            ({"delay": LONG}, "delay must be seconds"),
            ({"headers": {"n": 1, **{str(i): LONG for i in range(3)}}, "priority": LONG},
             "priority must be an integer"),
        ]:  # fmt: skip
            with pytest.raises(InvalidOptionError) as info:
                await broker.publish("x", queue="q", **options)
            short_and_naming(str(info.value), problem)
        with pytest.raises(InvalidQueueNameError) as info:
            await broker.publish("x", queue=LONG)
        short_and_naming(str(info.value), "queue name is 10000 characters long")
    for declare, problem in [
        (lambda: Schedule(every=60, queue="q", name="\x01" + LONG), "(10001 characters)"),
        (lambda: Schedule(cron=LONG, queue="q"), "(10000 characters) is not a valid cron"),
        (lambda: SqlaBroker(database_url, message_table=LONG), "(10000 characters) must be"),
    ]:
        with pytest.raises(InvalidOptionError) as info:
            declare()
        short_and_naming(str(info.value), problem)


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        pytest.param(["queue", "pause", LONG], "queue name is 10000 characters long",
                     id="queue"),
        pytest.param(["channel", "set", LONG, "--queue", "q", "--rate", "1/s"],
                     "1 to 255 characters", id="channel"),
        pytest.param(["channel", "pause", "a", "--queue", LONG],
                     "queue name is 10000 characters long", id="queue of a channel"),
        pytest.param(["channel", "set", "a", "--queue", "q", "--rate", LONG],
                     "(10000 characters)", id="rate"),
        pytest.param(["schedule", "pause", LONG], "(10000 characters)", id="schedule"),
        pytest.param(["publish", "q", "x", "--header", LONG], "is not NAME=VALUE",
                     id="header"),
        pytest.param(["dlq", "list", "--since", LONG], "neither an ISO 8601 time nor an age",
                     id="time"),
        pytest.param(["inspect", LONG], "not a whole number", id="message id"),
    ],
)  # fmt: skip
async def test_the_cli_says_a_very_long_value_is_wrong_in_a_short_message(
    database_url, engine, tables, args, problem
):
    result = await asyncio.to_thread(CliRunner().invoke, app, [*args, "--url", database_url])
    assert result.exit_code in (1, 2), result.output
    assert problem in " ".join(result.output.split()), result.output  # click's box wraps
    # click's usage box takes about 500 characters of its own
    assert len(result.output) < (800 if "Usage:" in result.output else 300), result.output
    assert "x" * 101 not in result.output
