"""A claim that returns a row this process already holds: the database lost the earlier
claim (a failover to a standby it had not reached) before the outage was noticed, and
handed the row out again. The message still runs once for its claim, and no batch of
outcomes holds two of one claim (faststream_sqla.subscriber.usecase._claimed_again)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
import sqlalchemy as sa

from faststream_sqla import MessageState, lifecycle
from faststream_sqla.annotations import SqlaMessage
from faststream_sqla.clock import utc_now
from faststream_sqla.schema import TOKEN_COLUMN
from faststream_sqla.subscriber.flusher import OutcomeFlusher
from tests.support.helpers import FAST, Recorder, captured_logger, rows, wait_until

#: longer than any test: release-stuck frees nothing here
NEVER = 3600.0
ALREADY_HELD = "already held"


async def lose_claim(engine, table, message_id: int, *, same_token: bool) -> None:
    """The row as a failover left it: its claim gone and due now. `same_token`: the
    claim count rolled back with it, so the next claim counts to the lost claim's token
    again; otherwise, as after release-stuck, the next claim counts past it."""
    values = {"state": MessageState.PENDING, "acquired_at": None, "next_attempt_at": utc_now(-1)}
    if same_token:
        values[TOKEN_COLUMN] = table.c[TOKEN_COLUMN] - 1
        values["deliveries_count"] = table.c.deliveries_count - 1
    async with engine.begin() as conn:
        await conn.execute(sa.update(table).where(table.c.id == message_id).values(values))


def recording_writes(broker) -> list[tuple[int, int]]:
    """The (id, token) of every outcome the broker writes, in order."""
    driver = broker.config.driver
    write = driver.write_outcomes
    written: list[tuple[int, int]] = []

    async def recorded(engine_, outcomes):
        written.extend((o.id, o.token) for o in outcomes)
        return await write(engine_, outcomes)

    driver.write_outcomes = recorded  # type: ignore[method-assign]
    return written


async def test_a_waiting_copy_of_a_message_claimed_again_is_dropped_and_it_runs_once(
    make_broker, dialect_name, engine, tables
):
    logger, lines = captured_logger(f"test.claimed_again.waiting.{dialect_name}")
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
        await broker.connect()
        written = recording_writes(broker)
        await broker.start()
        await broker.publish_batch("first", "second", queue="q")
        await running.wait()

        async def both_claimed() -> bool:
            found = await rows(engine, m)
            return len(found) == 2 and all(r["state"] == MessageState.PROCESSING for r in found)

        await wait_until(both_claimed)
        second = max(r["id"] for r in await rows(engine, m))
        await lose_claim(engine, m, second, same_token=True)

        async def claimed_again() -> bool:
            return bool(lines.containing(ALREADY_HELD))

        await wait_until(claimed_again)  # while "first" still holds the only worker
        finish.set()
        await got.wait_for(2)

        async def both_archived() -> bool:
            return len(await rows(engine, tables.archive)) == 2

        await wait_until(both_archived)
        (subscriber,) = broker.subscribers
        assert subscriber._held == {}
    assert got.calls == [("first", 1), ("second", 1)]
    assert [claim for claim in written if claim[0] == second] == [(second, 1)]
    (line,) = lines.containing(ALREADY_HELD)
    assert "1 waiting copies were dropped" in line.getMessage()
    assert not await rows(engine, m)


async def test_a_running_message_claimed_again_under_its_own_token_is_not_run_twice(
    make_broker, dialect_name, engine, tables
):
    logger, lines = captured_logger(f"test.claimed_again.same_token.{dialect_name}")
    broker = make_broker(logger=logger)
    got = Recorder()
    running, finish = asyncio.Event(), asyncio.Event()

    @broker.subscriber("q", max_workers=1, release_stuck_timeout=NEVER, **FAST)
    async def handle(body: str, msg: SqlaMessage) -> None:
        got.record((body, msg.deliveries_count))
        running.set()
        await finish.wait()

    m = tables.message
    async with broker:
        await broker.connect()
        written = recording_writes(broker)
        await broker.start()
        await broker.publish("only", queue="q")
        await running.wait()
        (row,) = await rows(engine, m)
        await lose_claim(engine, m, row["id"], same_token=True)

        async def claimed_again() -> bool:
            return bool(lines.containing(ALREADY_HELD))

        await wait_until(claimed_again)
        (stored,) = await rows(engine, m)  # claimed again, under the running copy's token
        assert (stored["state"], stored[TOKEN_COLUMN]) == (MessageState.PROCESSING, 1)
        finish.set()

        async def archived() -> bool:
            return len(await rows(engine, tables.archive)) == 1

        await wait_until(archived)  # by the running copy's outcome
        (subscriber,) = broker.subscribers
        assert subscriber._held == {}
    assert got.calls == [("only", 1)]
    assert written == [(row["id"], 1)]
    assert "1 already running are not run again" in lines.containing(ALREADY_HELD)[0].getMessage()
    assert not await rows(engine, m)


async def test_a_running_message_claimed_again_under_a_new_token_runs_again_and_stays_held(
    make_broker, dialect_name, engine, tables
):
    logger, lines = captured_logger(f"test.claimed_again.new_token.{dialect_name}")
    broker = make_broker(logger=logger)
    got = Recorder()
    first_running, finish_first = asyncio.Event(), asyncio.Event()
    second_running, finish_second = asyncio.Event(), asyncio.Event()

    @broker.subscriber("q", max_workers=1, release_stuck_timeout=NEVER, **FAST)
    async def handle(body: str, msg: SqlaMessage) -> None:
        got.record((body, msg.deliveries_count))
        if msg.deliveries_count == 1:
            first_running.set()
            await finish_first.wait()
        else:
            second_running.set()
            await finish_second.wait()

    m = tables.message
    async with broker:
        await broker.connect()
        written = recording_writes(broker)
        await broker.start()
        await broker.publish("only", queue="q")
        await first_running.wait()
        (row,) = await rows(engine, m)
        message_id = row["id"]
        await lose_claim(engine, m, message_id, same_token=False)

        async def claimed_again() -> bool:
            return bool(lines.containing(ALREADY_HELD))

        await wait_until(claimed_again)
        finish_first.set()
        await second_running.wait()
        (subscriber,) = broker.subscribers

        async def first_outcome_written() -> bool:
            return subscriber._flusher.written >= 1

        await wait_until(first_outcome_written)  # fenced out: it changed nothing
        (stored,) = await rows(engine, m)
        assert (stored["state"], stored[TOKEN_COLUMN]) == (MessageState.PROCESSING, 2)
        # the running second copy is still held: its lease is kept, its slot counted
        assert subscriber._held[message_id].token == 2
        finish_second.set()

        async def archived() -> bool:
            return len(await rows(engine, tables.archive)) == 1

        await wait_until(archived)
        assert subscriber._held == {}
    assert got.calls == [("only", 1), ("only", 2)]
    assert written == [(message_id, 1), (message_id, 2)]
    assert not await rows(engine, m)


async def test_a_batch_holding_two_outcomes_of_one_claim_is_written_with_the_first(
    make_broker, dialect_name, engine, tables, driver
):
    logger, lines = captured_logger(f"test.claimed_again.batch.{dialect_name}")
    async with make_broker() as publisher:
        await publisher.publish("twice", queue="q")
    (raw,) = await driver.claim(engine, "q", 10)
    started = datetime.now(UTC).replace(tzinfo=None)  # naive UTC, as claimed times are
    # two runs of one message, under one claim, both done
    outcomes = [lifecycle.completed(raw, started), lifecycle.completed(raw, started)]
    written: list[int] = []
    broker = make_broker(logger=logger)
    async with broker:
        await broker.connect()
        flusher = OutcomeFlusher(
            engine=engine,
            driver=driver,
            interval=0,
            batch_size=2,
            on_written=lambda batch: written.extend(o.id for o in batch),
            log=lambda level, text, **info: logger.log(level, text, **info),
            health=broker.config.health,
        )
        flusher.add_all(outcomes)
        # MySQL and SQLite refuse the second archive copy, and the retry writes one;
        # PostgreSQL's delete takes the row once and writes one at the first try
        assert await flusher.flush() or await flusher.flush()
    (archived,) = await rows(engine, tables.archive)
    assert archived["state"] == MessageState.COMPLETED
    assert written in ([raw.id], [raw.id, raw.id])
    refused = bool(lines.containing("outcomes dropped"))
    assert written == ([raw.id] if refused else [raw.id, raw.id])
    assert not await rows(engine, tables.message)
