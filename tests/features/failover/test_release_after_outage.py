"""When an outage ends, a subscriber puts back at once the messages the database still
shows PROCESSING under claims whose outcomes it had written (a failover to a standby
the outcome writes had not reached), instead of waiting out release_stuck_timeout; a
claim it still holds is never among them. Before its workers resume, it gives back
unhandled the prefetched messages whose claims the database no longer shows."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

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


@pytest.mark.parametrize("claim_lost", [True, False], ids=["claim_lost", "claim_kept"])
async def test_a_prefetched_message_runs_after_the_outage_only_if_its_claim_survived(
    make_broker, dialect_name, engine, tables, claim_lost
):
    logger, lines = captured_logger(f"test.recovery.prefetched.{dialect_name}.{claim_lost}")
    broker = make_broker(logger=logger)
    got = Recorder()
    running, finish = asyncio.Event(), asyncio.Event()

    @broker.subscriber("q", max_workers=1, release_stuck_timeout=NEVER, **FAST)
    async def handle(body: str, msg: SqlaMessage) -> None:
        got.record((body, msg.deliveries_count))
        if body == "first":
            running.set()
            await finish.wait()  # the only worker is busy: "second" waits in the buffer

    m = tables.message
    async with broker:
        await broker.start()
        await broker.publish_batch("first", "second", queue="q")
        await running.wait()

        async def both_claimed() -> bool:
            found = await rows(engine, m)
            return len(found) == 2 and all(r["state"] == MessageState.PROCESSING for r in found)

        await wait_until(both_claimed)
        (subscriber,) = broker.subscribers
        recovery = subscriber._recovery
        if claim_lost:
            # the new primary never saw this claim, and another process has claimed
            # the message there since: its row shows the next token
            async with engine.begin() as conn:
                await conn.execute(
                    sa.update(m)
                    .where(m.c.id == max(r["id"] for r in await rows(engine, m)))
                    .values({TOKEN_COLUMN: m.c[TOKEN_COLUMN] + 1})
                )
        an_outage(broker)
        await recovery.ran.wait()  # after the check that runs before workers resume
        finish.set()
        if claim_lost:

            async def first_archived() -> bool:
                return len(await rows(engine, tables.archive)) == 1

            await wait_until(first_archived)
            assert got.calls == [("first", 1)]  # "second" was given back, not run
            (row,) = await rows(engine, m)
            assert (row["state"], row[TOKEN_COLUMN]) == (MessageState.PROCESSING, 2)
            # the other process's claim lapses; this process delivers it again
            async with engine.begin() as conn:
                await conn.execute(
                    sa.update(m).values(state=MessageState.PENDING, acquired_at=None)
                )
        await got.wait_for(2)

        async def both_archived() -> bool:
            return len(await rows(engine, tables.archive)) == 2

        await wait_until(both_archived)
    assert got.calls == [("first", 1), ("second", 2 if claim_lost else 1)]
    assert recovery.given_back == (1 if claim_lost else 0)
    assert len(lines.containing("gave back 1 prefetched messages")) == (1 if claim_lost else 0)


async def test_a_check_before_resuming_that_fails_is_logged_and_work_resumes(
    make_broker, dialect_name
):
    logger, lines = captured_logger(f"test.recovery.check.{dialect_name}")
    broker = make_broker(logger=logger)
    got = Recorder()

    @broker.subscriber("q", release_stuck_timeout=NEVER, **FAST)
    async def handle(body: str) -> None:
        got.record(body)

    async def fails() -> None:
        raise RuntimeError("the read failed")

    async with broker:
        await broker.start()
        health = broker.config.health
        forget = health.before_resuming(fails)
        an_outage(broker)
        await health.reachable.wait()
        forget()
        await broker.publish("after", queue="q")
        await got.wait_for(1)
    assert got.calls == ["after"]
    assert lines.containing(
        "checking the claims held through the outage failed (RuntimeError: the read failed); "
        "resuming without"
    )
