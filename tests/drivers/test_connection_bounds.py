"""The broker holds no more server connections than its pool allows, and gives back
every overflow connection: counted in the server's own connection list."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from faststream_sqla import SqlaBroker

from tests.support.helpers import FAST, Recorder

POOL = {"pool_size": 2, "max_overflow": 3}
BURSTS, PUBLISHERS = 3, 50


async def server_connections(engine: AsyncEngine, database: str) -> int:
    """Connections the server has open to `database`, other than the one asking."""
    if engine.dialect.name == "postgresql":
        sql = (
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = :db AND pid <> pg_backend_pid()"
        )
    else:
        sql = (
            "SELECT count(*) FROM information_schema.PROCESSLIST "
            "WHERE DB = :db AND ID <> CONNECTION_ID()"
        )
    async with engine.connect() as conn:
        return int(await conn.scalar(sa.text(sql), {"db": database}))


async def quiet(engine: AsyncEngine, database: str, at_most: int) -> int:
    """The count once the server has finished closing what was closed (a closed
    client socket leaves the server's list a moment later)."""
    for _ in range(200):
        count = await server_connections(engine, database)
        if count <= at_most:
            return count
        await asyncio.sleep(0.025)
    return count


@pytest.fixture
def pool_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    caplog.set_level(logging.ERROR, logger="sqlalchemy.pool")
    return caplog.records


async def test_publish_bursts_stay_within_the_pool(
    dialect_name, database_url, engine, pool_errors
):
    broker = SqlaBroker(database_url, engine_options=POOL)
    threads_before = threading.active_count()
    database = make_url(database_url).database
    others = 0 if dialect_name == "sqlite" else await server_connections(engine, database)
    async with broker:
        await broker.connect()
        for burst in range(BURSTS):
            await asyncio.gather(
                *(broker.publish(i, queue="q") for i in range(PUBLISHERS))
            )
            if dialect_name == "sqlite":
                # aiosqlite runs each connection on a thread of its own
                assert threading.active_count() - threads_before <= POOL["pool_size"], burst
            else:
                held = await quiet(engine, database, others + POOL["pool_size"])
                assert held - others <= POOL["pool_size"], burst
        assert not broker.engine.pool.checkedout()
    assert not [r for r in pool_errors if "closing connection" in r.getMessage()]


async def test_a_draining_consumer_stays_within_the_pool(
    dialect_name, database_url, engine, pool_errors
):
    broker = SqlaBroker(database_url, engine_options=POOL)
    done = Recorder()
    total = 2000

    @broker.subscriber("q", max_workers=8, **FAST)
    async def handle(n: int) -> None:
        done.record(n)

    database = make_url(database_url).database
    others = 0 if dialect_name == "sqlite" else await server_connections(engine, database)
    async with broker:
        await broker.connect()
        await broker.publish_batch(*range(total), queue="q")
        await broker.start()
        # publishes racing the consumer for connections overflow the pool too
        await asyncio.gather(*(broker.publish(i, queue="other") for i in range(PUBLISHERS)))
        await done.wait_for(total, timeout=120)
        if dialect_name != "sqlite":
            # the consumer's loops and the listener may each hold one; none beyond
            limit = POOL["pool_size"] + POOL["max_overflow"]
            assert await server_connections(engine, database) - others <= limit
    assert not [r for r in pool_errors if "closing connection" in r.getMessage()]
    if dialect_name != "sqlite":
        assert await quiet(engine, database, others) <= others
