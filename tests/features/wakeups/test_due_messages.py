"""The wake-up watchers of MariaDB and SQLite also look for messages that have become
due (a delay ended, a retry came due, a lease was released), once per process and
`max_fetch_interval`, so idle subscribers need not poll for them one by one.

PostgreSQL's LISTEN hears only publishes: its subscribers poll as before.
"""

from __future__ import annotations

import asyncio

import pytest

from faststream_sqla import SqlaBroker
from faststream_sqla.drivers.watch import DUE_QUEUES_PER_LOOK
from faststream_sqla.wakeup import COVERED_POLL_FACTOR, WakeupHub
from tests.conftest import on_servers
from tests.support.helpers import recording
from tests.support.processes import publisher_process

#: the databases whose wake-up source is a watcher of the message table
WATCHED = [
    pytest.param("sqlite", marks=pytest.mark.databases("sqlite"), id="sqlite"),
    *on_servers("mysql"),
]
WAIT = 20.0


async def watched(broker: SqlaBroker) -> SqlaBroker:
    """`broker` started, its watcher connected and looking for due messages."""
    await broker.start()
    watcher = broker.notifications
    assert watcher is not None
    await watcher.wait_due_looks(1)
    assert broker.config.wakeups.covered
    return broker


@pytest.mark.parametrize("dialect_name", WATCHED)
async def test_a_message_delayed_by_another_process_is_handled_when_due_without_polling(
    make_broker, database_url, tmp_path
):
    # a poll every 30 s (10 x 3 s) would come after WAIT: the watcher's look for due
    # messages, every 3 s, is what can bring it
    consumer = make_broker()
    got = recording(consumer, "a", min_fetch_interval=0.0, max_fetch_interval=3.0)
    async with consumer:
        await watched(consumer)
        async with publisher_process(database_url, tmp_path / "publisher.log") as publisher:
            await publisher("publish a later 1.0")
            await got.wait_for(1, timeout=WAIT)
    assert got.calls == ["later"]


@pytest.mark.parametrize("dialect_name", WATCHED)
async def test_due_messages_are_found_in_a_process_with_more_queues_than_one_look_asks_about(
    make_broker, database_url, tmp_path
):
    queues = [f"q{i:03}" for i in range(DUE_QUEUES_PER_LOOK + 20)]
    consumer = make_broker()
    got = recording(consumer, queues, min_fetch_interval=0.0, max_fetch_interval=3.0)
    async with consumer:
        await watched(consumer)
        async with publisher_process(database_url, tmp_path / "publisher.log") as publisher:
            await publisher(f"publish {queues[-1]} last 1.0")
            await got.wait_for(1, timeout=WAIT)
    assert got.calls == ["last"]


@pytest.mark.parametrize("dialect_name", WATCHED)
async def test_an_idle_subscriber_leaves_its_polls_to_the_watcher(make_broker):
    consumer = make_broker()
    recording(consumer, "a", min_fetch_interval=0.0, max_fetch_interval=0.1)
    async with consumer:
        watcher = (await watched(consumer)).notifications
        fetcher = consumer.subscribers[0]._fetcher
        assert fetcher.idle_wait() == pytest.approx(0.1 * COVERED_POLL_FACTOR)
        # one poll may have been waiting when the watcher took over
        await watcher.wait_due_looks(watcher.due_looks + 1)
        rounds = fetcher.claim_rounds
        looks = watcher.due_looks
        await watcher.wait_due_looks(looks + 8)
        # eight looks for due messages, 0.1 s apart: polling alone would have claimed
        # about as often
        assert fetcher.claim_rounds - rounds <= 1


@pytest.mark.parametrize("dialect_name", on_servers("postgresql"))
async def test_postgresql_subscribers_keep_polling_beside_listen(make_broker):
    consumer = make_broker()
    recording(consumer, "a", min_fetch_interval=0.0, max_fetch_interval=0.5)
    async with consumer:
        await consumer.start()
        assert consumer.notifications is not None
        await consumer.notifications.wait_connects(1)
        assert not consumer.config.wakeups.covered
        assert consumer.subscribers[0]._fetcher.idle_wait() == 0.5


async def test_the_hub_asks_for_due_looks_as_often_as_its_most_eager_fetcher():
    hub = WakeupHub()
    assert hub.due_checks() == ((), 0.0)
    first, second, pull = asyncio.Event(), asyncio.Event(), asyncio.Event()
    hub.register(["b", "a"], first, max_fetch_interval=1.0)
    hub.register(["c"], second, max_fetch_interval=0.25)
    hub.register(["d"], pull)  # a pull waits on its own terms
    assert hub.due_checks() == (("a", "b", "c"), 0.25)
    hub.unregister(["c"], second)
    assert hub.due_checks() == (("a", "b"), 1.0)


async def test_fetchers_are_woken_to_poll_again_when_the_watcher_stops_covering():
    hub = WakeupHub()
    fetcher, pull = asyncio.Event(), asyncio.Event()
    hub.register(["a"], fetcher, max_fetch_interval=1.0)
    hub.register(["a"], pull)
    hub.set_covered(True)
    assert hub.covered and not fetcher.is_set()
    hub.set_covered(False)
    assert not hub.covered
    assert fetcher.is_set()
    assert not pull.is_set()
