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
from tests.support.helpers import FAST, LogLines, captured_logger, rows, wait_until
from tests.support.one_worker import (
    NEVER,
    Gate,
    one_worker_broker,
    second_waits_behind_first,
    start_recording_writes,
)

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


async def claimed_again(lines: LogLines) -> str:
    """Once the subscriber has met a claim of a message it holds: what it logged."""

    async def logged() -> bool:
        return bool(lines.containing(ALREADY_HELD))

    await wait_until(logged)
    (line,) = lines.containing(ALREADY_HELD)
    return line.getMessage()


async def archived(engine, tables, count: int) -> None:
    async def done() -> bool:
        return len(await rows(engine, tables.archive)) == count

    await wait_until(done)


async def test_a_waiting_copy_of_a_message_claimed_again_is_dropped_and_it_runs_once(
    make_broker, dialect_name, engine, tables
):
    first = Gate()  # holds the only worker: "second" waits in the buffer
    broker, got, lines = one_worker_broker(
        make_broker,
        f"test.claimed_again.waiting.{dialect_name}",
        lambda body, _deliveries: first if body == "first" else None,
    )
    m = tables.message
    async with broker:
        written = await start_recording_writes(broker)
        second = await second_waits_behind_first(broker, engine, m, first)
        await lose_claim(engine, m, second, same_token=True)
        logged = await claimed_again(lines)  # while "first" still holds the only worker
        first.finish.set()
        await got.wait_for(2)
        await archived(engine, tables, 2)
        (subscriber,) = broker.subscribers
        assert subscriber._held == {}
    assert got.calls == [("first", 1), ("second", 1)]
    assert [claim for claim in written if claim[0] == second] == [(second, 1)]
    assert "1 waiting copies were dropped" in logged
    assert not await rows(engine, m)


async def test_a_running_message_claimed_again_under_its_own_token_is_not_run_twice(
    make_broker, dialect_name, engine, tables
):
    gate = Gate()
    broker, got, lines = one_worker_broker(
        make_broker, f"test.claimed_again.same_token.{dialect_name}", lambda *_: gate
    )
    m = tables.message
    async with broker:
        written = await start_recording_writes(broker)
        await broker.publish("only", queue="q")
        await gate.running.wait()
        (row,) = await rows(engine, m)
        await lose_claim(engine, m, row["id"], same_token=True)
        logged = await claimed_again(lines)
        (stored,) = await rows(engine, m)  # claimed again, under the running copy's token
        assert (stored["state"], stored[TOKEN_COLUMN]) == (MessageState.PROCESSING, 1)
        gate.finish.set()
        await archived(engine, tables, 1)  # by the running copy's outcome
        (subscriber,) = broker.subscribers
        assert subscriber._held == {}
    assert got.calls == [("only", 1)]
    assert written == [(row["id"], 1)]
    assert "1 handed to workers under the same claim are not run again" in logged
    assert not await rows(engine, m)


async def test_a_running_message_claimed_again_under_a_new_token_runs_again_and_stays_held(
    make_broker, dialect_name, engine, tables
):
    gates = {1: Gate(), 2: Gate()}  # one per delivery
    broker, got, lines = one_worker_broker(
        make_broker,
        f"test.claimed_again.new_token.{dialect_name}",
        lambda _body, deliveries: gates[deliveries],
    )
    m = tables.message
    async with broker:
        written = await start_recording_writes(broker)
        await broker.publish("only", queue="q")
        await gates[1].running.wait()
        (row,) = await rows(engine, m)
        message_id = row["id"]
        await lose_claim(engine, m, message_id, same_token=False)
        (subscriber,) = broker.subscribers

        async def new_copy_held() -> bool:
            return subscriber._held[message_id].token == 2

        await wait_until(new_copy_held)
        gates[1].finish.set()
        await gates[2].running.wait()

        async def first_outcome_written() -> bool:
            return subscriber._flusher.written >= 1

        await wait_until(first_outcome_written)  # fenced out: it changed nothing
        (stored,) = await rows(engine, m)
        assert (stored["state"], stored[TOKEN_COLUMN]) == (MessageState.PROCESSING, 2)
        # the running second copy is still held: its lease is kept, its slot counted
        assert subscriber._held[message_id].token == 2
        gates[2].finish.set()
        await archived(engine, tables, 1)
        assert subscriber._held == {}
    assert got.calls == [("only", 1), ("only", 2)]
    assert written == [(message_id, 1), (message_id, 2)]
    assert not await rows(engine, m)
    assert not lines.containing(ALREADY_HELD)  # nothing this process ran was lost


async def test_a_retry_claimed_before_its_failed_attempt_is_let_go_of_stays_held(
    make_broker, dialect_name, engine, tables
):
    """A retry due at once is claimed again between its outcome's commit and the
    moment this process lets go of the claim it ran under: the new claim stays held."""
    logger, lines = captured_logger(f"test.claimed_again.retry.{dialect_name}")
    broker = make_broker(logger=logger)
    second = Gate()

    @broker.subscriber("q", max_workers=1, release_stuck_timeout=NEVER, **FAST)
    async def handle(body: str, msg: SqlaMessage) -> None:
        if msg.deliveries_count == 1:
            await msg.nack(delay=0)
            return
        await second.pass_through()

    async with broker:
        written = await start_recording_writes(broker)
        (subscriber,) = broker.subscribers
        flusher = subscriber._flusher
        after_write = flusher.after_write

        async def claimed_again_meanwhile(batch) -> None:
            await after_write(batch)
            if any(o.token == 1 for o in batch):

                async def new_claim_held() -> bool:
                    raw = subscriber._held.get(batch[0].id)
                    return raw is not None and raw.token == 2

                await wait_until(new_claim_held)

        on_written, first_let_go = flusher.on_written, asyncio.Event()

        def let_go(batch) -> None:
            on_written(batch)
            if any(o.token == 1 for o in batch):
                first_let_go.set()

        flusher.after_write, flusher.on_written = claimed_again_meanwhile, let_go
        await broker.publish("retried", queue="q")
        await second.running.wait()
        await first_let_go.wait()
        (message_id, _token), *_ = written
        assert subscriber._held[message_id].token == 2  # the retry's outcome let go of
        second.finish.set()
        await archived(engine, tables, 1)
        assert subscriber._held == {}
    assert written == [(message_id, 1), (message_id, 2)]
    assert not lines.containing(ALREADY_HELD)


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
