"""Event-loop turns around claims: a claim's reply waits for the loop's next turn, so
where a claim takes several round trips (MySQL/MariaDB) workers yield at every delivery
while one is in flight, and elsewhere only every few deliveries."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from faststream_sqla import SqlaBroker

from .helpers import Recorder, one_connection_engine, plain_message, prepared_dialect

BATCH = 20


async def test_workers_yield_at_every_delivery_while_a_multi_statement_claim_is_held(
    database_url, dialect_name
):
    broker = SqlaBroker(database_url, logger=None)
    ticks = 0  # advanced once per event-loop turn by `ticker`
    handled = Recorder()
    held, release = asyncio.Event(), asyncio.Event()

    @broker.subscriber(
        "q", max_workers=1, fetch_batch_size=BATCH, min_fetch_interval=0.0,
        max_fetch_interval=3600.0, flush_interval=0.01,
    )
    async def handle(body: int) -> None:
        handled.record((ticks, held.is_set() and not release.is_set()))
        if len(handled.calls) == BATCH:
            release.set()

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    async with broker:
        await broker.publish_batch(*range(3 * BATCH), queue="q")
        dialect = broker.config.dialect
        real_claim = dialect.claim
        calls = itertools.count(1)

        async def claim(engine, queue, limit):  # the real claim; the second one held
            if next(calls) == 2:
                held.set()
                await release.wait()
            return await real_claim(engine, queue, limit)

        dialect.claim = claim
        tick_task = asyncio.create_task(ticker())
        try:
            await broker.start()
            await handled.wait_for(3 * BATCH)
        finally:
            tick_task.cancel()

    # The first claim's batch is handled while the second claim is held in flight.
    during = [tick for tick, in_claim in handled.calls[:BATCH] if in_claim]
    assert len(during) == BATCH
    steps = [b - a for a, b in itertools.pairwise(during)]
    if dialect.claim_round_trips > 1:
        assert dialect_name == "mysql"
        assert all(step > 0 for step in steps), steps  # one delivery per turn
    else:
        assert 0 in steps, steps  # several deliveries share a turn


@pytest.fixture
async def my_engine(server_databases):
    async with one_connection_engine(server_databases["mysql"]) as engine:
        yield engine


async def test_mysql_claim_round_trips_counts_the_statements_a_claim_sends(my_engine):
    """The server's own count of statements on the one connection, around a claim."""
    dialect = await prepared_dialect(my_engine)
    await dialect.insert_committed(my_engine, [plain_message() for _ in range(3)])

    async def statements_so_far() -> int:
        async with my_engine.connect() as conn:
            result = await conn.exec_driver_sql(
                "SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS"
                " WHERE VARIABLE_NAME = 'QUESTIONS'"
            )
            return int(result.scalar_one())

    first, second = await statements_so_far(), await statements_so_far()
    reading = second - first  # what one reading itself adds
    before = await statements_so_far()
    assert len(await dialect.claim(my_engine, "q", 10)) == 3
    after = await statements_so_far()
    assert after - before - reading == dialect.claim_round_trips == 4
