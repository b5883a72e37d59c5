"""A worker that loses its database waits the outage out: it logs it once and its end
once, starts no handler meanwhile, and spends no attempt on it.
A handler's failure to reach some other service is still an ordinary failed attempt."""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy.ext.asyncio import create_async_engine

from chaos.servers import free_port
from faststream_sqla import MessageState, SqlaBroker
from faststream_sqla.retry import NoRetryStrategy
from faststream_sqla.schema import QueueTables

from tests.support.helpers import FAST, CuttableDatabase, Recorder, captured_logger, rows, wait_until

MESSAGES = 40
WORKERS = 4


async def test_workers_wait_out_an_outage_without_spending_attempts(
    database_url, dialect_name, tmp_path
):
    database = CuttableDatabase(database_url, dialect_name, tmp_path)
    await database.start()
    async with SqlaBroker(database.direct_url) as publisher:
        await publisher.publish_batch(*range(MESSAGES), queue="in")

    logger, log = captured_logger(f"test.outage.{dialect_name}")
    broker = SqlaBroker(database.url, logger=logger)
    started, go = Recorder(), asyncio.Event()

    @broker.subscriber("in", max_workers=WORKERS, **FAST)
    async def handle(body: int) -> None:
        started.record(body)
        await go.wait()
        await broker.publish(body, queue="out")  # fails while the database is gone

    health = broker.config.health
    direct = create_async_engine(database.direct_url)
    tables = QueueTables()
    try:
        async with broker:
            await broker.start()
            await started.wait_for(WORKERS)
            await database.cut(broker.engine)
            go.set()  # the running handlers now fail on the lost database

            async def lasted_three_probes() -> bool:
                return health.is_down and health.failed_probes >= 3

            await wait_until(lasted_three_probes)
            runs_during_outage = len(started.calls)
            await database.restore()

            async def all_handled() -> bool:
                done = await rows(direct, tables.archive, tables.archive.c.queue == "in")
                return len(done) == MESSAGES

            await wait_until(all_handled)
        archived = await rows(direct, tables.archive, tables.archive.c.queue == "in")
        published = await rows(direct, tables.message, tables.message.c.queue == "out")
    finally:
        await direct.dispose()

    # Only the handlers running when the database went away started meanwhile.
    assert runs_during_outage == WORKERS
    assert sorted(r["payload"] for r in published) == sorted(
        str(i).encode() for i in range(MESSAGES)
    )
    assert {r["state"] for r in archived} == {MessageState.COMPLETED}
    assert {r["attempts_count"] for r in archived} == {1}  # the outage cost no attempt
    # The outage in the log: one line when it began, one when it ended, and the
    # tracebacks of the handlers it interrupted, not one per loop, try or message.
    assert health.outages == 1
    assert len(log.containing("lost the database")) == 1
    assert len(log.containing("answers again")) == 1
    assert not log.containing("failed, retrying") and not log.containing("times in a row")
    assert len([r for r in log.records if r.exc_info]) <= WORKERS
    others = [
        r.getMessage() for r in log.records
        if r.levelno >= logging.WARNING and not r.exc_info
        and "lost the database" not in r.getMessage() and "answers again" not in r.getMessage()
    ]
    assert len(others) <= 2, others  # PostgreSQL's listener: lost, and a failed reconnect
    if database.direct_url.password:
        assert all(database.direct_url.password not in r.getMessage() for r in log.records)


async def test_a_handler_that_cannot_reach_another_service_fails_as_usual(
    database_url, engine, tables
):
    closed_port = free_port()  # nothing listens on it: connecting is refused
    broker = SqlaBroker(database_url)
    tried = Recorder()

    @broker.subscriber("q", retry_strategy=NoRetryStrategy(), **FAST)
    async def handle(body: str) -> None:
        tried.record(body)
        await asyncio.open_connection("127.0.0.1", closed_port)

    async with broker:
        await broker.start()
        await broker.publish("call the API", queue="q")
        await tried.wait_for(1)

        async def failed() -> bool:
            return bool(await rows(engine, tables.archive))

        await wait_until(failed)
    (row,) = await rows(engine, tables.archive)
    assert (row["state"], row["attempts_count"]) == (MessageState.FAILED, 1)
    assert row["last_error"].startswith("ConnectionRefusedError")
    assert broker.config.health.outages == 0
