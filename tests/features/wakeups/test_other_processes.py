"""A publish in another process wakes a consumer at once, on every database:
PostgreSQL's LISTEN, the watchers of new message ids on MariaDB and SQLite.

Consumers here poll every 30 s, and each wait gives up after 20: a message handled at
all was brought by a wake-up, never by a poll.
"""

from __future__ import annotations

import asyncio

import pytest

from faststream_sqla import SqlaBroker
from tests.conftest import on_servers
from tests.support.helpers import recording
from tests.support.processes import publisher_process

#: no poll comes before WAIT runs out: only a wake-up can deliver in time
NO_POLLING = {"min_fetch_interval": 0.0, "max_fetch_interval": 30.0, "flush_interval": 0.01}
WAIT = 20.0


async def started(broker: SqlaBroker) -> SqlaBroker:
    """`broker` started, its wake-up source connected (it hears publishes from then on,
    and the wake-up of every queue it sends at each connect is behind us)."""
    await broker.start()
    assert broker.notifications is not None
    await broker.notifications.wait_connects(1)
    return broker


async def test_a_publish_in_another_process_wakes_the_consumer(make_broker, database_url, tmp_path):
    consumer = make_broker()
    got = recording(consumer, "a", **NO_POLLING)
    async with consumer:
        await started(consumer)
        async with publisher_process(database_url, tmp_path / "publisher.log") as publisher:
            await publisher("publish a first")
            await got.wait_for(1, timeout=WAIT)
            await publisher("publish a second")
            await got.wait_for(2, timeout=WAIT)
    assert got.calls == ["first", "second"]


async def test_a_publish_to_another_queue_wakes_no_fetcher_of_this_one(
    make_broker, database_url, tmp_path
):
    consumer = make_broker()
    recording(consumer, "a", **NO_POLLING)
    got_b = recording(consumer, "b", **NO_POLLING)
    async with consumer:
        await started(consumer)
        woken_a = asyncio.Event()
        consumer.config.wakeups.register(["a"], woken_a)
        async with publisher_process(database_url, tmp_path / "publisher.log") as publisher:
            await publisher("publish b only-b")
            # handled: the look (or notification) that found it has woken whom it woke
            await got_b.wait_for(1, timeout=WAIT)
    assert not woken_a.is_set()


async def test_a_process_that_consumes_nothing_starts_no_wake_up_source(make_broker):
    broker = make_broker()
    broker.publisher("a")
    async with broker:
        await broker.start()
        assert broker.notifications is None


async def test_without_cross_process_wakeups_the_consumer_only_polls(
    make_broker, database_url, tmp_path
):
    consumer = make_broker(cross_process_wakeups=False)
    got = recording(consumer, "a", min_fetch_interval=0.0, max_fetch_interval=0.2)
    async with consumer:
        await consumer.start()
        assert consumer.notifications is None
        async with publisher_process(database_url, tmp_path / "publisher.log") as publisher:
            await publisher("publish a polled")
            await got.wait_for(1, timeout=WAIT)


@pytest.mark.parametrize("dialect_name", on_servers("mysql"))
async def test_the_mariadb_watcher_comes_back_after_its_connection_is_killed(
    make_broker, database_url, engine, tmp_path
):
    consumer = make_broker()
    got = recording(consumer, "a", **NO_POLLING)
    async with consumer:
        watcher = (await started(consumer)).notifications
        # another connection of the same server ends the watcher's
        async with engine.connect() as conn:
            await conn.exec_driver_sql("KILL %s", (watcher.connection_id,))
        await watcher.wait_connects(2)
        async with publisher_process(database_url, tmp_path / "publisher.log") as publisher:
            await publisher("publish a after-kill")
            await got.wait_for(1, timeout=WAIT)
    assert got.calls == ["after-kill"]


@pytest.mark.parametrize("dialect_name", ["sqlite"])
async def test_the_sqlite_watcher_hears_publishes_after_another_process_checkpoints(
    make_broker, database_url, tmp_path
):
    consumer = make_broker()
    got = recording(consumer, "a", **NO_POLLING)
    async with consumer:
        await started(consumer)
        async with publisher_process(database_url, tmp_path / "publisher.log") as publisher:
            await publisher("publish a before")
            await got.wait_for(1, timeout=WAIT)
            # the WAL copied into the database file, and emptied
            assert await publisher("checkpoint") == "CHECKPOINTED 0 0"
            await publisher("publish a after")
            await got.wait_for(2, timeout=WAIT)
    assert got.calls == ["before", "after"]


@pytest.mark.parametrize("dialect_name", on_servers())
async def test_a_publish_committed_after_a_later_one_still_wakes_its_queue(
    make_broker, database_url, engine, tmp_path
):
    """An id is handed out at the insert: a transaction that commits after a later
    publish's shows an id below the newest a watcher has seen. SQLite has one writer,
    so no later publish can commit first there."""
    consumer = make_broker()
    got_a = recording(consumer, "a", **NO_POLLING)
    got_b = recording(consumer, "b", **NO_POLLING)
    async with consumer, SqlaBroker(database_url) as outbox:
        await started(consumer)
        await outbox.connect()
        async with engine.connect() as conn:
            # the outbox broker's hub is not the consumer's: no local wake-up
            await outbox.publish("late", queue="a", connection=conn)
            async with publisher_process(database_url, tmp_path / "publisher.log") as publisher:
                await publisher("publish b later")
                await got_b.wait_for(1, timeout=WAIT)
            assert got_a.calls == []
            await conn.commit()
        await got_a.wait_for(1, timeout=WAIT)
