"""A broker on a MariaDB primary, and the admin API, the CLI and the collector reading
from its replica through `read_url`: the figures are the replica's once it has caught
up, with its lag beside them; a replica whose replication stopped says it cannot tell;
every change goes to the primary.

MariaDB only: the replica is MariaDB's (chaos/servers.py `ReplicatedMariaDB`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from chaos.servers import ReplicatedMariaDB
from faststream_sqla import SqlaBroker
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.connecting import create_engine
from faststream_sqla.migrations import upgrade_schema
from tests.support.cli import cli

pytestmark = [
    pytest.mark.slow,
    pytest.mark.databases("mysql"),
    pytest.mark.asyncio(loop_scope="module"),
]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pair() -> AsyncIterator[ReplicatedMariaDB]:
    """A primary with our schema (replayed on the replica) and its replica."""
    async with ReplicatedMariaDB() as replicated:
        engine = create_engine(replicated.primary.url)
        await upgrade_schema(engine)
        await engine.dispose()
        yield replicated


async def publish(pair: ReplicatedMariaDB, queue: str, count: int) -> None:
    broker = SqlaBroker(pair.primary.url, logger=None)
    async with broker:
        await broker.connect()
        await broker.publish_batch(*(f"m{i}" for i in range(count)), queue=queue)


async def test_figures_published_on_the_primary_are_read_from_the_replica_with_its_lag(pair):
    await publish(pair, "replica-reads", 3)
    await pair.until_caught_up()
    async with QueueAdmin(pair.primary.url, read_url=pair.replica.url) as admin:
        (stats,) = await admin.queues(["replica-reads"])
        assert stats.ready.value == 3
        lag = await admin.replica_lag()
    assert lag is not None and lag.seconds is not None and lag.seconds >= 0
    result = await cli(pair.primary.url, "queues", "--read-url", pair.replica.url)
    assert result.stdout.startswith("read from replica, ")
    assert "replica-reads" in result.stdout


async def test_a_change_through_an_admin_with_read_url_lands_on_the_primary(pair):
    await publish(pair, "replica-changes", 1)
    await pair.until_caught_up()
    async with QueueAdmin(pair.primary.url, read_url=pair.replica.url) as admin:
        assert await admin.pause_queue("replica-changes") is True
    # the replica's root may write past read_only: had the pause gone there, the
    # primary would not hold it
    async with QueueAdmin(pair.primary.url) as primary:
        assert "replica-changes" in await primary.paused_queues()
    await pair.until_caught_up()
    async with QueueAdmin(pair.primary.url, read_url=pair.replica.url) as admin:
        assert "replica-changes" in await admin.paused_queues()


async def test_a_replica_whose_replication_stopped_says_it_cannot_tell_its_lag(pair):
    await pair.replica.sql("STOP SLAVE")
    try:
        async with QueueAdmin(pair.primary.url, read_url=pair.replica.url) as admin:
            lag = await admin.replica_lag()
        assert lag is not None and lag.seconds is None
        result = await cli(pair.primary.url, "workers", "--read-url", pair.replica.url)
        assert "lag unknown" in result.stdout
    finally:
        await pair.replica.sql("START SLAVE")
