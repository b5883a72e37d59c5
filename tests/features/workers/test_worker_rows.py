"""Each started broker keeps one row in the workers table: its queues, its handlers in
flight and the messages it holds, refreshed as it renews leases and removed when it
stops; the admin API and the command line list them, and a processing message names
the worker that holds it."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from faststream_sqla import InvalidOptionError, SqlaBroker
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.cli.common import EXIT_USAGE
from faststream_sqla.drivers import workers as store
from faststream_sqla.drivers.workers import WorkerIdentity, WorkerLoad
from faststream_sqla.worker_registry import PRUNE_AFTER, package_version

from tests.support.cli import cli, cli_json
from tests.support.helpers import FAST, Recorder, wait_until

#: leases renewed, and rows refreshed, every 0.2 s
#: rows refreshed every second, "gone" after three silent seconds: longer than a loaded
#: host's pauses, which once made a live broker read as gone at 0.6 s
QUICK = {**FAST, "release_stuck_timeout": 3.0}


async def test_a_running_broker_lists_its_queues_handlers_and_held_messages(
    database_url, tables
):
    broker = SqlaBroker(database_url)
    started, go = Recorder(), asyncio.Event()

    @broker.subscriber(["orders", "refunds"], max_workers=2, **QUICK)
    async def handle(body: str) -> None:
        started.record(body)
        await go.wait()

    async with QueueAdmin(database_url) as admin, broker:
        await broker.start()
        identity = broker.config.workers.identity
        assert identity is not None
        message_id = await broker.publish("one", queue="orders")
        await started.wait_for(1)

        async def lists_the_running_handler() -> bool:
            found = await admin.workers()
            return len(found) == 1 and found[0].in_flight == 1 and found[0].holding

        await wait_until(lists_the_running_handler)
        (worker,) = await admin.workers()
        assert worker.worker_id == identity.worker_id
        assert (worker.host, worker.pid) == (socket.gethostname(), os.getpid())
        assert worker.queues == ["orders", "refunds"]
        assert worker.version == package_version()
        assert worker.status == "alive"
        assert worker.holding == [message_id]
        assert worker.gone_after == pytest.approx(3.0)
        assert worker.started_at <= worker.last_seen

        details = await admin.inspect(message_id)
        assert (details.state, details.held_by) == ("PROCESSING", worker.worker_id)
        page = await admin.messages("orders")
        assert [(m.id, m.held_by) for m in page.items] == [(message_id, worker.worker_id)]

        go.set()

        async def settled() -> bool:
            found = await admin.workers()
            return found[0].in_flight == 0 and not found[0].holding

        await wait_until(settled)
        assert (await admin.inspect(message_id)).held_by is None

    async with QueueAdmin(database_url) as admin:
        assert await admin.workers() == []  # a graceful stop removes the row


async def test_two_brokers_in_one_process_are_two_rows_and_a_publisher_has_no_queues(
    database_url,
):
    consumer, publisher = SqlaBroker(database_url), SqlaBroker(database_url)

    @consumer.subscriber("jobs", **QUICK)
    async def handle(body: str) -> None:
        pass

    async with QueueAdmin(database_url) as admin, consumer, publisher:
        await consumer.start()
        await publisher.start()
        found = {w.worker_id: w for w in await admin.workers()}
        assert set(found) == {
            consumer.config.workers.identity.worker_id,
            publisher.config.workers.identity.worker_id,
        }
        assert found[consumer.config.workers.identity.worker_id].queues == ["jobs"]
        assert found[publisher.config.workers.identity.worker_id].queues == []
        assert {w.pid for w in found.values()} == {os.getpid()}

        await publisher.stop()
        assert [w.worker_id for w in await admin.workers()] == [
            consumer.config.workers.identity.worker_id
        ]


async def test_a_broker_that_is_only_connected_does_not_register(database_url):
    async with QueueAdmin(database_url) as admin, SqlaBroker(database_url) as broker:
        await broker.publish("x", queue="jobs")
        assert await admin.workers() == []


async def test_a_refresh_that_finds_its_row_deleted_inserts_it_again(database_url, engine, tables):
    broker = SqlaBroker(database_url)

    @broker.subscriber("jobs", **QUICK)
    async def handle(body: str) -> None:
        pass

    async with QueueAdmin(database_url) as admin, broker:
        await broker.start()
        worker_id = broker.config.workers.identity.worker_id
        async with engine.begin() as conn:
            assert await store.forget(conn, tables.workers, worker_id) == 1

        async def listed_again() -> bool:
            # the registry counts its re-insert once its own write returns, which may be
            # after this read already sees the row
            listed = [w.worker_id for w in await admin.workers()] == [worker_id]
            return listed and broker.config.workers.reinserted >= 1

        await wait_until(listed_again)
        (worker,) = await admin.workers()
        assert worker.queues == ["jobs"] and worker.status == "alive"


async def test_rows_silent_for_an_hour_are_pruned_when_a_broker_starts(
    database_url, engine, tables
):
    long_gone = WorkerIdentity("0" * 32, "old-host", 1, "0.0.1")
    async with engine.begin() as conn:
        load = WorkerLoad(queues=["jobs"], in_flight=0, holding=[], silent_after=30.0)
        await store.register(conn, tables.workers, long_gone, load)
        long_ago = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(
            seconds=PRUNE_AFTER + 60
        )
        await conn.execute(sa.update(tables.workers).values(last_seen=long_ago))
    async with QueueAdmin(database_url) as admin:
        (old,) = await admin.workers()
        assert (old.worker_id, old.status) == (long_gone.worker_id, "gone")
        broker = SqlaBroker(database_url)
        async with broker:
            await broker.start()
            found = await admin.workers()
            assert [w.worker_id for w in found] == [broker.config.workers.identity.worker_id]


async def test_gone_after_takes_seconds_within_bounds(database_url):
    async with QueueAdmin(database_url) as admin:
        for bad in (0, -1, PRUNE_AFTER + 1, float("nan"), True, "5"):
            with pytest.raises(InvalidOptionError, match="gone_after"):
                await admin.workers(gone_after=bad)
        assert await admin.workers(gone_after=5) == []


async def test_the_workers_command_lists_them(database_url):
    broker = SqlaBroker(database_url)

    @broker.subscriber("jobs", **QUICK)
    async def handle(body: str) -> None:
        pass

    async with broker:
        await broker.start()
        worker_id = broker.config.workers.identity.worker_id
        (row,) = await cli_json(database_url, "workers")
        assert (row["worker_id"], row["queues"], row["status"]) == (worker_id, ["jobs"], "alive")
        table = await cli(database_url, "workers", "--gone-after", "5m")
        assert worker_id in table.stdout and "alive" in table.stdout
    bad = await cli(database_url, "workers", "--gone-after", "2h", code=EXIT_USAGE)
    assert "--gone-after" in bad.output
    empty = await cli(database_url, "workers")
    assert "No broker process is registered" in empty.stdout
