"""Event-loop turns around claims: a claim's reply waits for the loop's next turn, so
where a claim takes several round trips (MySQL/MariaDB) workers yield at every delivery
while one is in flight, and elsewhere only every few deliveries."""

from __future__ import annotations

import asyncio
import itertools

from faststream_sqla import SqlaBroker

from tests.support.helpers import Recorder

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
        driver = broker.config.driver
        real_claim = driver.claim
        calls = itertools.count(1)

        async def claim(engine, queue, limit):  # the real claim; the second one held
            if next(calls) == 2:
                held.set()
                await release.wait()
            return await real_claim(engine, queue, limit)

        driver.claim = claim
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
    if driver.claim_round_trips > 1:
        assert dialect_name == "mysql"
        assert all(step > 0 for step in steps), steps  # one delivery per turn
    else:
        assert 0 in steps, steps  # several deliveries share a turn
