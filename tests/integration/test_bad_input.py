"""Hostile and mistaken input gets one typed error, the same on every database, before
anything is written, and never breaks the caller's transaction."""

from __future__ import annotations

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
    SqlaBroker,
    SqlaMessage,
)
from faststream_sqla.cli import app
from faststream_sqla.subscriber.config import ConsumeOptions

from .helpers import FAST, Recorder, rows

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


async def test_a_content_type_the_caller_gives_is_kept(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber("q", **FAST)
    async def handle(body: bytes, msg: SqlaMessage) -> None:
        got.record(msg.content_type)

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
