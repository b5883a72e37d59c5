"""When an outage ends, a subscriber puts back at once the messages the database still
shows PROCESSING under claims whose outcomes it had written (a failover to a standby
the outcome writes had not reached), instead of waiting out release_stuck_timeout; a
claim it still holds is never among them. Before its workers resume, it drops unhandled
the prefetched messages whose claims the database no longer shows."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

import faststream_sqla.health as health_module
from faststream_sqla import MessageState, SqlaBroker
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.annotations import SqlaMessage
from faststream_sqla.clock import utc_now
from faststream_sqla.schema import TOKEN_COLUMN, QueueTables
from tests.support.helpers import (
    FAST,
    CuttableDatabase,
    Recorder,
    captured_logger,
    rows,
    wait_until,
)
from tests.support.one_worker import (
    NEVER,
    Gate,
    one_worker_broker,
    second_waits_behind_first,
    start_recording_writes,
)


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


#: what the new primary shows for a claimed message waiting in the buffer
CLAIM_LOST = "claim_lost"  # PENDING again, under the token before the claim's, due later
CLAIM_LOST_DUE_NOW = "claim_lost_due_now"  # the same, due at once: claimed again here
# claimed since by another process, under a later token (a claim after the loss counts
# to this claim's own token, which reads as CLAIM_KEPT: the row cannot tell them apart)
CLAIMED_ELSEWHERE = "claimed_elsewhere"
CLAIM_KEPT = "claim_kept"


@pytest.mark.parametrize(
    "after_failover", [CLAIM_LOST, CLAIM_LOST_DUE_NOW, CLAIMED_ELSEWHERE, CLAIM_KEPT]
)
async def test_a_prefetched_message_runs_after_the_outage_only_if_its_claim_survived(
    make_broker, dialect_name, engine, tables, after_failover
):
    first = Gate()  # holds the only worker: "second" waits in the buffer
    broker, got, lines = one_worker_broker(
        make_broker,
        f"test.recovery.prefetched.{dialect_name}.{after_failover}",
        lambda body, _deliveries: first if body == "first" else None,
    )
    m = tables.message
    async with broker:
        written = await start_recording_writes(broker)
        second = await second_waits_behind_first(broker, engine, m, first)
        (subscriber,) = broker.subscribers
        recovery = subscriber._recovery
        # No claim in flight or begun until the outage is known: one of the lost row
        # before it would find a row this process holds (test_claimed_again.py).
        async with subscriber._fetcher.claiming:
            async with engine.begin() as conn:
                if after_failover in (CLAIM_LOST, CLAIM_LOST_DUE_NOW):
                    await conn.execute(
                        sa.update(m)
                        .where(m.c.id == second)
                        .values({
                            "state": MessageState.PENDING, "acquired_at": None,
                            # due later: only this test decides when it is claimed again
                            "next_attempt_at": utc_now(3600 if after_failover == CLAIM_LOST else -1),
                            TOKEN_COLUMN: m.c[TOKEN_COLUMN] - 1,
                            "deliveries_count": m.c.deliveries_count - 1,
                        })  # fmt: skip
                    )
                elif after_failover == CLAIMED_ELSEWHERE:
                    await conn.execute(
                        sa.update(m).where(m.c.id == second).values({TOKEN_COLUMN: 2})
                    )
            an_outage(broker)
        await recovery.ran.wait()  # after the check that runs before workers resume
        first.finish.set()
        if after_failover in (CLAIM_LOST, CLAIMED_ELSEWHERE):

            async def first_archived() -> bool:
                return len(await rows(engine, tables.archive)) == 1

            await wait_until(first_archived)
            assert got.calls == [("first", 1)]  # "second" was dropped, not run
            assert second not in subscriber._held
            (row,) = await rows(engine, m)
            expected = (MessageState.PENDING, 0) if after_failover == CLAIM_LOST else (
                MessageState.PROCESSING, 2
            )
            assert (row["state"], row[TOKEN_COLUMN]) == expected  # nothing written
            # the queue delivers it again: due now, or the other claim lapsed
            async with engine.begin() as conn:
                await conn.execute(
                    sa.update(m).values(
                        state=MessageState.PENDING, acquired_at=None, next_attempt_at=utc_now(-1)
                    )
                )
        await got.wait_for(2)

        async def both_archived() -> bool:
            return len(await rows(engine, tables.archive)) == 2

        await wait_until(both_archived)
        assert subscriber._held == {}
    again = 2 if after_failover == CLAIMED_ELSEWHERE else 1
    assert got.calls == [("first", 1), ("second", again)]
    # its completion: nothing for the dropped claim
    assert len([claim for claim in written if claim[0] == second]) == 1
    assert recovery.dropped == (0 if after_failover == CLAIM_KEPT else 1)
    dropped_lines = lines.containing("dropped 1 prefetched messages unhandled")
    assert len(dropped_lines) == (0 if after_failover == CLAIM_KEPT else 1)
    assert not lines.containing("stale")


async def test_a_dropped_breaker_probe_is_probed_again_by_this_process(
    database_url, dialect_name, tmp_path
):
    """This process holds the queue breaker's probe; the outage loses the probe's claim
    while the message waits in the buffer. Once dropped, it is no longer this process's
    probe: it claims the message again as its probe, and the breaker closes."""
    database = CuttableDatabase(database_url, dialect_name, tmp_path)
    await database.start()
    direct = create_async_engine(database.direct_url)
    tables = QueueTables()
    m = tables.message
    async with direct.begin() as conn:  # the breaker is due to probe
        await conn.execute(tables.controls.insert().values(
            queue="probed", channel="", updated_at=utc_now(), breaker_state="OPEN",
            breaker_failures=1, breaker_changed_at=utc_now(-10), breaker_reopens_at=utc_now(-1),
        ))  # fmt: skip
    async with SqlaBroker(database.direct_url) as publisher:
        await publisher.publish("m", queue="probed")
    broker = SqlaBroker(database.url)
    got = Recorder()

    @broker.subscriber(
        "probed", circuit_breaker_threshold=1, circuit_breaker_cooldown=0.1,
        release_stuck_timeout=NEVER, **FAST,
    )  # fmt: skip
    async def handle(body: str, msg: SqlaMessage) -> None:
        got.record(msg.deliveries_count)
        if len(got.calls) == 1:
            # the failover: the new primary never saw this claim
            async with direct.begin() as conn:
                await conn.execute(sa.update(m).values({
                    "state": MessageState.PENDING, "acquired_at": None,
                    TOKEN_COLUMN: m.c[TOKEN_COLUMN] - 1,
                    "deliveries_count": m.c.deliveries_count - 1,
                }))  # fmt: skip
            await database.cut(broker.engine)
            raise ConnectionRefusedError("the primary is gone")

    try:
        async with broker:
            await broker.start()
            (subscriber,) = broker.subscribers
            health = broker.config.health

            async def held_in_the_buffer() -> bool:
                return health.is_down and bool(subscriber._buffer.messages())

            await wait_until(held_in_the_buffer)
            await database.restore()
            await got.wait_for(2)

            async def closed() -> bool:
                async with QueueAdmin(direct) as admin:
                    (status,) = await admin.breakers("probed")
                return status.state == "CLOSED"

            await wait_until(closed)
        (row,) = await rows(direct, tables.archive)
    finally:
        await direct.dispose()
    assert got.calls == [1, 1]
    assert row["state"] == MessageState.COMPLETED
    assert subscriber._recovery.dropped == 1


async def test_the_database_counts_as_down_until_the_checks_before_resuming_are_done(
    make_broker,
):
    broker = make_broker()
    async with broker:
        await broker.connect()
        health = broker.config.health
        checking, done = asyncio.Event(), asyncio.Event()

        async def slow_check() -> None:
            checking.set()
            await done.wait()

        forget = health.before_resuming(slow_check)
        an_outage(broker)
        await checking.wait()  # the database answers: the probe is through
        assert health.is_down and not health.reachable.is_set()
        done.set()
        await health.reachable.wait()
        assert not health.is_down
        forget()


def raises_at_once() -> Awaitable[None]:
    raise RuntimeError("the read failed")


async def raises_when_awaited() -> None:
    raise RuntimeError("the read failed")


async def never_done() -> None:
    await asyncio.Event().wait()


@pytest.mark.parametrize(
    ("check", "logged"),
    [
        (raises_at_once, "RuntimeError: the read failed"),
        (raises_when_awaited, "RuntimeError: the read failed"),
        (never_done, "TimeoutError: not done within 0.2s"),
    ],
    ids=["raises_at_once", "raises_when_awaited", "never_done"],
)
async def test_a_check_before_resuming_that_fails_is_logged_and_work_resumes(
    make_broker, dialect_name, monkeypatch, check, logged
):
    monkeypatch.setattr(health_module, "RESUME_CHECK_TIMEOUT", 0.2)
    logger, lines = captured_logger(f"test.recovery.check.{dialect_name}.{check.__name__}")
    broker = make_broker(logger=logger)
    got = Recorder()

    @broker.subscriber("q", release_stuck_timeout=NEVER, **FAST)
    async def handle(body: str) -> None:
        got.record(body)

    async with broker:
        await broker.start()
        health = broker.config.health
        forget = health.before_resuming(check)
        an_outage(broker)
        await health.reachable.wait()
        forget()
        await broker.publish("after", queue="q")
        await got.wait_for(1)
    assert got.calls == ["after"]
    assert lines.containing(f"a check before resuming failed ({logged}); resuming without it")
