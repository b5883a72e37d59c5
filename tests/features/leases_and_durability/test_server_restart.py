"""A database server stopped and started again mid-drain, on a throwaway instance of
its own (chaos/servers.py): workers and publishers report the outage once, reconnect by
themselves, and nothing is lost or left behind."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from chaos.servers import throwaway
from faststream_sqla import DatabaseUnreachableError, MessageState, SqlaBroker, upgrade_schema
from faststream_sqla.schema import QueueTables

from tests.support.helpers import FAST, Recorder, captured_logger, rows, wait_until

pytestmark = pytest.mark.slow

N = 2000
AFTER = 100


@pytest.mark.parametrize(
    ("server_kind", "how"),
    [
        pytest.param(kind, how, marks=pytest.mark.databases(kind), id=f"{kind}-{how}")
        for kind, how in (
            ("postgresql", "fast"), ("postgresql", "immediate"), ("mysql", "term"), ("mysql", "kill")
        )
    ],
)
async def test_a_restarted_server_costs_nothing_but_the_wait(server_kind, how):
    async with throwaway(server_kind) as server:
        await upgrade_schema(server.url)
        consumer_log, consumer_lines = captured_logger(f"test.restart.{server_kind}.{how}.consumer")
        publisher_log, publisher_lines = captured_logger(f"test.restart.{server_kind}.{how}.publisher")
        consumer = SqlaBroker(server.url, logger=consumer_log)
        handled = Recorder()

        @consumer.subscriber("jobs", max_workers=4, **FAST)
        async def handle(body: int) -> None:
            await asyncio.sleep(0.002)  # slow enough that the stop lands mid-drain
            handled.record(body)

        engine = create_async_engine(server.url)
        tables = QueueTables()
        try:
            async with consumer, SqlaBroker(server.url, logger=publisher_log) as publisher:
                await publisher.publish_batch(*range(N), queue="jobs")
                await consumer.start()
                await handled.wait_for(N // 4)

                if server_kind == "postgresql":
                    await server.stop(how)
                else:
                    await server.stop(kill=how == "kill")
                with pytest.raises(DatabaseUnreachableError):
                    await publisher.publish(-1, queue="jobs")

                async def consumer_noticed() -> bool:
                    return consumer.config.health.is_down

                await wait_until(consumer_noticed)
                await server.start()
                await publisher.publish_batch(*range(N, N + AFTER), queue="jobs")

                async def all_archived() -> bool:
                    return len(await rows(engine, tables.archive)) == N + AFTER

                await wait_until(all_archived, timeout=60)
            archive = await rows(engine, tables.archive)
            left = await rows(engine, tables.message)
        finally:
            await engine.dispose()

    assert {r["state"] for r in archive} == {MessageState.COMPLETED}
    assert left == []
    assert set(handled.calls) == set(range(N + AFTER))  # nothing lost
    # each side reported the outage once and its end once
    for lines, broker in ((consumer_lines, consumer), (publisher_lines, publisher)):
        outages = broker.config.health.outages
        assert outages >= 1
        assert len(lines.containing("lost the database")) == outages
        assert len(lines.containing("answers again")) == outages
    assert not consumer_lines.containing("failed, retrying")
    assert not consumer_lines.containing("times in a row")
