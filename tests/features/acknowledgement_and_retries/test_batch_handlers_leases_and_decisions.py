"""Batch handlers, renewed leases, and decisions raised under AckPolicy.MANUAL."""

from __future__ import annotations

import asyncio

import pytest
from faststream import AckPolicy
from faststream.exceptions import NackMessage

from faststream_sqla import MessageState, SqlaBroker, SqlaMessage, SqlaRouter
from faststream_sqla.exceptions import InvalidOptionError
from faststream_sqla.message import SqlaBatchMessage
from faststream_sqla.retry import ConstantRetryStrategy
from tests.support.helpers import FAST, Recorder, handle_one, rows, wait_until

LATER = ConstantRetryStrategy(delay_seconds=3600, max_attempts=5)


async def test_batch_handler_gets_lists_and_settles_each_message(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber("q", batch=True, fetch_batch_size=50, retry_strategy=LATER, **FAST)
    async def handle(bodies: list[int], msg: SqlaMessage) -> None:
        assert isinstance(msg, SqlaBatchMessage)
        for item in msg.messages:
            body = await item.decode()
            if body % 3 == 0:
                await item.reject()
            elif body % 3 == 1:
                await item.nack()
        got.record(bodies)  # the rest are acked by the default policy

    async with broker:
        ids = await broker.publish_batch(*range(9), queue="q")
        await broker.start()
        await got.wait_for(1)
        while sum(len(b) for b in got.calls) < 9:
            await got.wait_for(len(got.calls) + 1)

    assert sorted(n for batch in got.calls for n in batch) == list(range(9))
    assert len(got.calls) < 9  # delivered in batches, not one by one
    by_id = {r["id"]: r for r in await rows(engine, tables.archive)}
    by_id.update({r["id"]: r for r in await rows(engine, tables.message)})
    states = [by_id[i]["state"] for i in ids]
    expected = [MessageState.FAILED, MessageState.RETRYABLE, MessageState.COMPLETED] * 3
    assert states == expected
    assert all(by_id[i]["attempts_count"] == 1 for i in ids)


async def test_failing_batch_nacks_every_unsettled_message(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber("q", batch=True, retry_strategy=LATER, **FAST)
    async def handle(bodies: list[str], msg: SqlaMessage) -> None:
        await msg.messages[0].ack()
        got.record(bodies)
        raise RuntimeError("batch failed")

    async with broker:
        await broker.publish_batch("a", "b", "c", queue="q")
        await broker.start()
        await got.wait_for(1)

    assert got.calls == [["a", "b", "c"]]
    (done,) = await rows(engine, tables.archive)
    assert done["state"] == MessageState.COMPLETED
    retrying = await rows(engine, tables.message)
    assert [r["state"] for r in retrying] == [MessageState.RETRYABLE] * 2
    assert all("batch failed" in r["last_error"] for r in retrying)


async def test_lease_is_renewed_while_a_handler_runs_long(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    started, release = Recorder(), asyncio.Event()

    @broker.subscriber("q", release_stuck_timeout=0.3, release_stuck_interval=0.05, **FAST)
    async def handle(body: str, msg: SqlaMessage) -> None:
        started.record(msg)
        await release.wait()

    async with broker:
        await broker.start()
        await broker.publish("long", queue="q")
        (msg,) = await started.wait_for(1)
        first_claim = msg.acquired_at.replace(tzinfo=None)

        async def renewed_well_past_the_timeout() -> bool:
            (row,) = await rows(engine, tables.message)
            return (row["acquired_at"] - first_claim).total_seconds() > 0.6

        await wait_until(renewed_well_past_the_timeout)
        release.set()

    assert len(started.calls) == 1  # never released to run again
    (row,) = await rows(engine, tables.archive)
    assert (row["state"], row["deliveries_count"]) == (MessageState.COMPLETED, 1)


async def handle_raising(broker: SqlaBroker, decision: BaseException) -> None:
    """One message to a handler under AckPolicy.MANUAL that raises `decision`."""
    got = Recorder()

    @broker.subscriber("q", ack_policy=AckPolicy.MANUAL, retry_strategy=LATER, **FAST)
    async def handle(body: str) -> None:
        got.record(body)
        raise decision

    await handle_one(broker, got)


async def test_manual_policy_honours_raised_decisions(make_broker, engine, tables):
    await handle_raising(make_broker(), NackMessage(delay=120))

    (row,) = await rows(engine, tables.message)
    assert row["state"] == MessageState.RETRYABLE
    assert row["last_error"] is None  # a decision, not a failure
    assert 110 < (row["next_attempt_at"] - row["last_attempt_at"]).total_seconds() < 130


async def test_router_subscribers_follow_the_broker_ack_policy(database_url, engine, tables):
    router = SqlaRouter(prefix="r.")
    got = Recorder()

    @router.subscriber("q", retry_strategy=LATER, **FAST)
    async def handle(body: str) -> None:
        got.record(body)
        raise RuntimeError("rejected, not retried")

    broker = SqlaBroker(database_url, ack_policy=AckPolicy.REJECT_ON_ERROR)
    broker.include_router(router)
    await handle_one(broker, got, "x", queue="r.q")

    (row,) = await rows(engine, tables.archive)
    assert row["state"] == MessageState.FAILED


async def test_batch_publish_gives_each_message_its_own_correlation_id(database_url, engine, tables):
    async with SqlaBroker(database_url) as broker:
        await broker.publish_batch("a", "b", queue="q")
    first, second = await rows(engine, tables.message)
    assert first["correlation_id"] and second["correlation_id"]
    assert first["correlation_id"] != second["correlation_id"]


@pytest.mark.parametrize("delay", [float("inf"), float("nan"), -1, 10**12])
async def test_nack_delay_must_be_sane(delay):
    from faststream_sqla.message import SqlaMessage as Message

    from .test_state_machine_rules import claimed

    msg = Message(raw_message=claimed(), body=b"")
    with pytest.raises(InvalidOptionError):
        await msg.nack(delay=delay)


async def test_sync_driver_url_is_a_typed_error():
    with pytest.raises(InvalidOptionError, match="async driver"):
        await SqlaBroker("postgresql+psycopg2://postgres@127.0.0.1/test").start()


async def test_invalid_raised_nack_delay_is_recorded_not_obeyed(make_broker, engine, tables):
    await handle_raising(make_broker(), NackMessage(delay=10**12))

    (row,) = await rows(engine, tables.message)
    assert row["state"] == MessageState.RETRYABLE
    assert "NackMessage delay" in row["last_error"]
    assert row["attempts_count"] == 1  # the attempt counts, so max_attempts still ends it
