"""When an outage ends, a subscriber puts back at once the messages the database still
shows PROCESSING under claims whose outcomes it had written (a failover to a standby
the outcome writes had not reached), instead of waiting out release_stuck_timeout; a
claim it still holds is never among them."""

from __future__ import annotations

import asyncio

from faststream_sqla import MessageState
from faststream_sqla.annotations import SqlaMessage
from faststream_sqla.schema import TOKEN_COLUMN
from tests.support.helpers import FAST, Recorder, captured_logger, rows, wait_until

#: longer than any test: release-stuck can free nothing here
NEVER = 3600.0


def an_outage(broker) -> None:
    """The broker meets an unreachable database; its probe finds it back at once, so
    the outage opens and ends as one around a failover would."""
    assert broker.config.health.noticed(ConnectionRefusedError("the primary is gone"))


async def test_a_message_whose_outcome_the_database_lost_is_delivered_again_once_the_outage_ends(
    make_broker, dialect_name, engine, tables
):
    logger, lines = captured_logger(f"test.recovery.lost.{dialect_name}")
    broker = make_broker(logger=logger)
    got = Recorder()

    @broker.subscriber("q", release_stuck_timeout=NEVER, **FAST)
    async def handle(body: str, msg: SqlaMessage) -> None:
        got.record((body, msg.deliveries_count))

    async with broker:
        await broker.connect()
        driver = broker.config.driver
        write = driver.write_outcomes
        lost = asyncio.Event()

        async def first_write_lost_in_a_failover(engine_, outcomes):
            # Acknowledged by the old primary, never replicated: the new one still
            # shows the message PROCESSING under this claim.
            if not lost.is_set():
                lost.set()
                return len(outcomes)
            return await write(engine_, outcomes)

        driver.write_outcomes = first_write_lost_in_a_failover  # type: ignore[method-assign]
        await broker.start()
        await broker.publish("once", queue="q")
        await lost.wait()
        (row,) = await rows(engine, tables.message)
        assert row["state"] == MessageState.PROCESSING

        an_outage(broker)
        await got.wait_for(2)

        async def archived() -> bool:
            return bool(await rows(engine, tables.archive))

        await wait_until(archived)
    (row,) = await rows(engine, tables.archive)
    assert row["state"] == MessageState.COMPLETED
    assert got.calls == [("once", 1), ("once", 2)]
    assert len(lines.containing("released 1 messages still PROCESSING")) == 1


async def test_a_claim_still_held_is_not_released_when_the_outage_ends(
    make_broker, dialect_name, engine, tables
):
    logger, lines = captured_logger(f"test.recovery.held.{dialect_name}")
    broker = make_broker(logger=logger)
    got = Recorder()
    running, finish = asyncio.Event(), asyncio.Event()

    @broker.subscriber("q", release_stuck_timeout=NEVER, **FAST)
    async def handle(body: str, msg: SqlaMessage) -> None:
        got.record(msg.deliveries_count)
        if msg.deliveries_count == 1:
            await msg.nack(delay=0)  # its outcome written: this claim is remembered
            return
        running.set()  # claimed again, under the next token, and held
        await finish.wait()

    async with broker:
        await broker.start()
        await broker.publish("once", queue="q")
        await running.wait()
        (subscriber,) = broker.subscribers
        recovery = subscriber._recovery
        an_outage(broker)
        await recovery.ran.wait()
        (row,) = await rows(engine, tables.message)
        assert row["state"] == MessageState.PROCESSING
        assert row[TOKEN_COLUMN] == 2
        assert recovery.released == 0
        finish.set()

        async def archived() -> bool:
            return bool(await rows(engine, tables.archive))

        await wait_until(archived)
    (row,) = await rows(engine, tables.archive)
    assert row["state"] == MessageState.COMPLETED
    assert got.calls == [1, 2]
    assert not lines.containing("released")
