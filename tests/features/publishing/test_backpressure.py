"""Backpressure: a publish that would take a queue past max_queue_size is refused before
anything is written, a batch as a whole, and accepted again once the queue drains."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from faststream_sqla import InvalidOptionError, QueueFullError, SqlaBroker
from tests.support.helpers import recording, rows, wait_until


async def test_a_full_queue_refuses_then_accepts_after_draining(make_broker, engine, tables):
    broker = make_broker(max_queue_size=5)
    got = recording(broker, "q", body=int)

    async with broker:
        await broker.connect()
        await broker.publish_batch(1, 2, 3, 4, queue="q")
        with pytest.raises(QueueFullError, match="'q' is full"):
            await broker.publish_batch(5, 6, queue="q")  # judged as a whole
        await broker.publish(5, queue="q")  # exactly at the limit
        with pytest.raises(QueueFullError):
            await broker.publish(6, queue="q")
        await broker.publish(1, queue="other")  # each queue counts its own
        assert len(await rows(engine, tables.message, tables.message.c.queue == "q")) == 5

        await broker.start()
        await got.wait_for(5)

        async def drained() -> bool:
            return not await rows(engine, tables.message, tables.message.c.queue == "q")

        await wait_until(drained)
        await broker.publish_batch(*range(5), queue="q")  # room again


async def test_in_flight_messages_count_too(database_url, engine, tables):
    broker = SqlaBroker(database_url, max_queue_sizes={"q": 2})
    async with broker:
        await broker.connect()
        await broker.publish_batch(1, 2, queue="q")
        await broker.config.driver.claim(broker.engine, "q", 1)  # one PROCESSING
        with pytest.raises(QueueFullError):
            await broker.publish(3, queue="q")
        await broker.publish_batch(*range(10), queue="unlimited")


async def test_an_outbox_publish_refused_leaves_the_transaction_usable(
    database_url, engine, tables, business_table
):
    business = business_table
    broker = SqlaBroker(database_url, max_queue_size=1)
    async with broker:
        await broker.connect()
        await broker.publish("first", queue="q")
        async with AsyncSession(engine) as session:
            await session.execute(business.insert().values(id=1))
            with pytest.raises(QueueFullError):
                await broker.publish("second", queue="q", connection=session)
            await session.commit()  # the business write still commits
    async with engine.connect() as conn:
        assert (await conn.execute(sa.select(business.c.id))).scalars().all() == [1]
    assert [r["payload"] for r in await rows(engine, tables.message)] == [b"first"]


@pytest.mark.parametrize(
    "options",
    [{"max_queue_size": 0}, {"max_queue_size": "10"}, {"max_queue_sizes": {"q": -1}},
     {"max_queue_sizes": [("q", 1)]}, {"max_queue_sizes": {"": 1}}],
)
def test_bad_limits_are_refused_at_construction(options):
    with pytest.raises(InvalidOptionError):
        SqlaBroker("sqlite+aiosqlite:///:memory:", **options)


async def test_a_queue_without_a_limit_is_not_probed(database_url, engine, tables):
    # max_queue_sizes={"q": None} lifts the broker-wide limit for that queue
    broker = SqlaBroker(database_url, max_queue_size=1, max_queue_sizes={"q": None})
    async with broker:
        await broker.connect()
        await broker.publish_batch(*range(3), queue="q")
        with pytest.raises(QueueFullError):
            await broker.publish_batch(1, 2, queue="other")
