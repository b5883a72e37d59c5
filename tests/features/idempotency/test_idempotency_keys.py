"""Idempotency keys: a queue holds one active message per key."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from faststream_sqla import Envelope, IdempotencyConflictError, SqlaBroker, SqlaBrokerError
from faststream_sqla.exceptions import InvalidOptionError
from tests.support.helpers import recording, rows, wait_until


async def test_the_same_key_and_payload_returns_the_first_id_and_writes_nothing(
    database_url, engine, tables
):
    broker = SqlaBroker(database_url)
    async with broker:
        await broker.connect()
        first = await broker.publish({"order": 1}, queue="q", idempotency_key="order-1")
        again = await broker.publish({"order": 1}, queue="q", idempotency_key="order-1")
        other_queue = await broker.publish({"order": 1}, queue="q2", idempotency_key="order-1")
    assert again == first and other_queue != first
    stored = await rows(engine, tables.message)
    assert [(r["queue"], r["idempotency_key"]) for r in stored] == [
        ("q", "order-1"), ("q2", "order-1")
    ]


async def test_the_same_key_with_another_payload_is_a_conflict(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    async with broker:
        await broker.connect()
        first = await broker.publish("a", queue="q", idempotency_key="k")
        with pytest.raises(IdempotencyConflictError, match="different payload") as raised:
            await broker.publish_batch(
                "unkeyed", Envelope("b", idempotency_key="k"), queue="q"
            )
    assert isinstance(raised.value, SqlaBrokerError)
    assert (raised.value.key, raised.value.message_id) == ("k", first)
    assert [r["id"] for r in await rows(engine, tables.message)] == [first]  # all or nothing


async def test_a_batch_gets_the_right_id_for_every_item_in_order(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    async with broker:
        await broker.connect()
        held = await broker.publish_batch(
            Envelope("x", idempotency_key="x"), Envelope("z", idempotency_key="z"), queue="q"
        )
        ids = await broker.publish_batch(
            "plain 1",
            Envelope("x", idempotency_key="x"),  # held
            Envelope("y", idempotency_key="y"),  # new
            Envelope("y", idempotency_key="y"),  # new, twice in this batch
            "plain 2",
            Envelope("z", idempotency_key="z"),  # held
            queue="q",
        )
    stored = {r["id"]: r for r in await rows(engine, tables.message)}
    assert len(stored) == 5  # x, z, plain 1, y, plain 2
    assert ids[1] == held[0] and ids[5] == held[1]
    assert ids[2] == ids[3]
    assert [stored[i]["payload"] for i in ids] == [
        b"plain 1", b"x", b"y", b"y", b"plain 2", b"z"
    ]


async def test_a_key_twice_in_one_batch_with_other_payloads_writes_nothing(
    database_url, engine, tables
):
    broker = SqlaBroker(database_url)
    async with broker:
        await broker.connect()
        with pytest.raises(IdempotencyConflictError, match="twice in this batch"):
            await broker.publish_batch(
                Envelope("a", idempotency_key="k"), Envelope("b", idempotency_key="k"), queue="q"
            )
        with pytest.raises(InvalidOptionError, match="its own"):
            await broker.publish_batch("a", "b", queue="q", idempotency_key="k")
    assert await rows(engine, tables.message) == []


async def test_once_archived_the_key_is_free_again(make_broker, engine, tables):
    broker = make_broker()
    got = recording(broker, "q")

    async with broker:
        await broker.start()
        first = await broker.publish("job", queue="q", idempotency_key="k")
        await got.wait_for(1)

        async def archived() -> bool:
            return len(await rows(engine, tables.archive)) == 1

        await wait_until(archived)
        second = await broker.publish("job", queue="q", idempotency_key="k")
        assert second != first
        assert await got.wait_for(2) == ["job", "job"]


async def test_twenty_concurrent_publishers_of_one_key_leave_one_row(database_url, engine, tables):
    brokers = [SqlaBroker(database_url) for _ in range(4)]
    for b in brokers:
        await b.connect()
    try:
        ids = await asyncio.gather(
            *(
                brokers[i % len(brokers)].publish("once", queue="q", idempotency_key="race")
                for i in range(20)
            )
        )
    finally:
        for b in brokers:
            await b.stop()
    (row,) = await rows(engine, tables.message)
    assert set(ids) == {row["id"]}


async def test_in_the_callers_transaction_a_rollback_frees_the_key(
    database_url, engine, tables, business_table
):
    broker = SqlaBroker(database_url)
    async with broker:
        await broker.connect()
        async with broker.engine.connect() as conn:
            async with conn.begin() as transaction:
                await conn.execute(sa.insert(business_table).values(id=1))
                first = await broker.publish(
                    "a", queue="q", idempotency_key="k", connection=conn
                )
                # the same key again in the same transaction: found, not inserted
                again = await broker.publish(
                    "a", queue="q", idempotency_key="k", connection=conn
                )
                assert again == first
                with pytest.raises(IdempotencyConflictError):
                    await broker.publish("b", queue="q", idempotency_key="k", connection=conn)
                # the conflict left the caller's transaction usable
                await conn.execute(sa.insert(business_table).values(id=2))
                await transaction.rollback()
        assert await rows(engine, tables.message) == []
        await broker.publish("b", queue="q", idempotency_key="k")  # no conflict now
    assert [r["payload"] for r in await rows(engine, tables.message)] == [b"b"]
