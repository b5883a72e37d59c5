"""Wake-ups: local publishes on every database, LISTEN/NOTIFY across brokers on PostgreSQL.

Subscribers here poll once an hour, so a message arriving at all proves a wake-up.
"""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla import SqlaBroker
from tests.support.helpers import Recorder, recording

NO_POLLING = {"min_fetch_interval": 0.0, "max_fetch_interval": 3600.0, "flush_interval": 0.01}


async def test_local_publish_wakes_an_idle_subscriber(make_broker):
    broker = make_broker()
    got = recording(broker, "q", **NO_POLLING)

    async with broker:
        await broker.start()
        await broker.publish("first", queue="q")
        await got.wait_for(1, timeout=10)
        await broker.publish_batch("second", "third", queue="q")
        await got.wait_for(3, timeout=10)
    assert got.calls == ["first", "second", "third"]


async def test_local_outbox_publish_wakes_at_commit(make_broker, engine):
    broker = make_broker()
    got = recording(broker, "q", **NO_POLLING)

    async with broker:
        await broker.start()
        async with engine.connect() as conn:
            await broker.publish("outbox", queue="q", connection=conn)
            await conn.commit()
        await got.wait_for(1, timeout=10)


async def test_outbox_wake_up_waits_for_the_commit_to_land(database_url, engine):
    # SQLAlchemy's "commit" event fires before the database commits. A fetcher woken
    # then claimed while the commit was in flight, found nothing and slept for its
    # whole max_fetch_interval. The wake-up must come once the rows are visible.
    async with SqlaBroker(database_url) as broker:
        woken = asyncio.Event()
        broker.config.wakeups.register(["q"], woken)
        async with engine.connect() as conn:
            await broker.publish("outbox", queue="q", connection=conn)
            transaction = conn.sync_connection.get_transaction()
            commit = asyncio.ensure_future(conn.commit())
            await asyncio.wait_for(woken.wait(), timeout=10)
            # woken: the commit is over, not merely begun
            assert not transaction.is_active
            await commit
        async with engine.connect() as other:
            count = await other.scalar(sa.text("SELECT COUNT(*) FROM message"))
        assert count == 1


async def _listening_subscriber(
    url: str, got: Recorder, fetch_intervals: dict[str, float] = NO_POLLING
) -> SqlaBroker:
    broker = SqlaBroker(url)

    @broker.subscriber(["a", "b"], **fetch_intervals)
    async def handle(body: str) -> None:
        got.record(body)

    await broker.start()
    assert broker.notifications is not None
    await broker.notifications.wait_connects(1)
    return broker


async def _publish_from_another_broker(url: str, body: str, queue: str) -> None:
    async with SqlaBroker(url) as producer:  # another broker: no local wake-up
        await producer.publish(body, queue=queue)


@pytest.mark.databases("postgresql")
async def test_notify_wakes_a_subscriber_in_another_broker(server_databases):
    url = server_databases["postgresql"]
    got = Recorder()
    consumer = await _listening_subscriber(url, got)
    try:
        await _publish_from_another_broker(url, "from afar", queue="a")
        await got.wait_for(1, timeout=10)
    finally:
        await consumer.stop()
    assert got.calls == ["from afar"]


@pytest.mark.databases("postgresql")
async def test_rolled_back_publish_notifies_nobody(server_databases):
    url = server_databases["postgresql"]
    got = Recorder()
    consumer = await _listening_subscriber(url, got)
    heard: list[str] = []
    wakeups = consumer.config.wakeups
    original = wakeups.wake

    def spy(queues):  # records what the listener passes on
        heard.extend(queues)
        original(queues)

    consumer.notifications.on_queue = lambda q: spy((q,))
    engine = create_async_engine(url)
    try:
        async with SqlaBroker(url) as producer:
            async with engine.connect() as conn:
                await producer.publish("never", queue="a", connection=conn)
                await conn.rollback()
            await producer.publish("after", queue="b")
            await got.wait_for(1, timeout=10)
    finally:
        await consumer.stop()
        await engine.dispose()
    assert got.calls == ["after"]
    assert heard == ["b"]  # notifications arrive in commit order: "a" would be first


@pytest.mark.databases("postgresql")
async def test_listener_comes_back_after_its_connection_is_killed(server_databases):
    url = server_databases["postgresql"]
    got = Recorder()
    consumer = await _listening_subscriber(url, got)
    engine = create_async_engine(url)
    try:
        listener = consumer.notifications
        async with engine.connect() as conn:
            await conn.execute(
                sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": listener.backend_pid}
            )
        await listener.wait_connects(2)
        await _publish_from_another_broker(url, "after reconnect", queue="b")
        await got.wait_for(1, timeout=10)
    finally:
        await consumer.stop()
        await engine.dispose()
    assert got.calls == ["after reconnect"]


@pytest.mark.databases("postgresql")
async def test_one_transaction_notifies_each_queue_once(server_databases):
    url = server_databases["postgresql"]
    got = Recorder()
    consumer = await _listening_subscriber(url, got)
    heard = Recorder()
    passed_on = consumer.notifications.on_queue

    def spy(queue: str) -> None:  # records what the listener passes on
        heard.record(queue)
        passed_on(queue)

    consumer.notifications.on_queue = spy
    engine = create_async_engine(url)
    try:
        async with SqlaBroker(url) as producer:
            async with engine.connect() as conn:
                # three statements for "a" (other headers make a statement of their
                # own), a hundred rows among them, and one for "b"
                await producer.publish("one", queue="a", connection=conn)
                await producer.publish_batch(*map(str, range(99)), queue="a", connection=conn)
                await producer.publish("tagged", queue="a", headers={"k": "v"}, connection=conn)
                await producer.publish("two", queue="b", connection=conn)
                await conn.commit()
            # notifications arrive in commit order: once this one is heard, every
            # notification of the transaction above has been heard too
            await producer.publish("marker", queue="b")
            await heard.wait_for(3, timeout=10)
            await got.wait_for(103, timeout=30)  # nothing left behind for other tests
    finally:
        await consumer.stop()
        await engine.dispose()
    assert heard.calls == ["a", "b", "b"]


@pytest.mark.databases("postgresql")
async def test_a_subscriber_polls_while_its_listener_is_down(server_databases):
    url = server_databases["postgresql"]
    got = Recorder()
    polling = {"min_fetch_interval": 0.0, "max_fetch_interval": 0.2, "flush_interval": 0.01}
    consumer = await _listening_subscriber(url, got, polling)
    try:
        await consumer.notifications.stop()  # no notification reaches this broker now
        await _publish_from_another_broker(url, "polled", queue="a")
        await got.wait_for(1, timeout=10)
    finally:
        await consumer.stop()
    assert got.calls == ["polled"]
