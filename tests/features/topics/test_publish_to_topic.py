"""Publishing to a topic: one copy per bound queue, in one transaction (the caller's or
its own), ids in queue-name order; each copy an independent message that keeps its
topic. A rolled-back outbox publish leaves no copy, idempotency keys deduplicate per
queue, and backpressure counts every copy. On every database."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from faststream_sqla import (
    IdempotencyConflictError,
    InvalidOptionError,
    InvalidTopicError,
    QueueFullError,
    SqlaBroker,
    SqlaMessage,
)
from faststream_sqla.admin import QueueAdmin
from tests.support.cli import cli
from tests.support.helpers import Recorder, rows


async def _bind(url: str, *bindings: tuple[str, str]) -> None:
    async with QueueAdmin(url) as admin:
        for pattern, queue in bindings:
            await admin.bind(pattern, queue)


def _copies(engine, tables):
    m = tables.message
    return rows(engine, m, m.c.topic.isnot(None))


async def test_a_topic_reaches_each_queue_bound_by_either_wildcard_once(
    make_broker, database_url, engine, tables
) -> None:
    await _bind(
        database_url,
        ("orders.*", "billing"),
        ("orders.#", "audit"),
        ("#", "audit"),  # two matching bindings, still one copy
        ("*.created", "welcome"),
        ("payments.*", "ledger"),
    )
    broker = make_broker()
    got = Recorder()

    @broker.subscriber("billing")
    @broker.subscriber("audit")
    @broker.subscriber("welcome")
    async def handle(body: dict, msg: SqlaMessage) -> None:
        got.record((msg.queue, msg.topic, body))

    async with broker:
        await broker.connect()
        ids = await broker.publish({"order": 1}, topic="orders.created")
        stored = {r["id"]: r for r in await rows(engine, tables.message)}
        # one id per queue, in queue-name order
        assert [stored[i]["queue"] for i in ids] == ["audit", "billing", "welcome"]
        assert {r["topic"] for r in stored.values()} == {"orders.created"}

        await broker.start()
        await got.wait_for(3)
        assert sorted(got.calls) == [
            ("audit", "orders.created", {"order": 1}),
            ("billing", "orders.created", {"order": 1}),
            ("welcome", "orders.created", {"order": 1}),
        ]

        async def queues_of(topic: str) -> list[str]:
            ids = await broker.publish({}, topic=topic)
            # the live table first: a message settled between the two reads moves to the
            # archive, which the second read then sees
            found = {r["id"]: r["queue"] for r in await rows(engine, tables.message)}
            found |= {r["id"]: r["queue"] for r in await rows(engine, tables.archive)}
            return [found[i] for i in ids]

        assert await queues_of("orders") == ["audit"]  # `#` matching zero words
        assert await queues_of("users.created") == ["audit", "welcome"]
        await _unbind_all(database_url)
        assert await broker.publish("x", topic="orders.created") == []  # nothing bound


async def _unbind_all(url: str) -> None:
    async with QueueAdmin(url) as admin:
        for b in await admin.bindings():
            await admin.unbind(b.pattern, b.queue)


async def test_a_batch_goes_queue_by_queue_with_the_options_on_every_copy(
    make_broker, database_url, engine, tables
) -> None:
    await _bind(database_url, ("orders.*", "b"), ("orders.*", "a"))
    broker = make_broker()
    async with broker:
        await broker.connect()
        ids = await broker.publish_batch(
            1, 2, 3, topic="orders.created", priority=7, delay=3600, channel="eu"
        )
        stored = {r["id"]: r for r in await rows(engine, tables.message)}
        assert [(stored[i]["queue"], stored[i]["payload"]) for i in ids] == [
            ("a", b"1"),
            ("a", b"2"),
            ("a", b"3"),
            ("b", b"1"),
            ("b", b"2"),
            ("b", b"3"),
        ]
        assert {(r["priority"], r["channel"], r["topic"]) for r in stored.values()} == {
            (7, "eu", "orders.created")
        }
        # the publisher object takes a topic instead of its queue
        publisher = broker.publisher("elsewhere")
        assert len(await publisher.publish("p", topic="orders.paid")) == 2
        assert len(await publisher.publish_batch("p", "q", topic="orders.paid")) == 4
        assert await rows(engine, tables.message, tables.message.c.queue == "elsewhere") == []


async def test_a_binding_made_by_another_process_after_connecting_is_honoured(
    make_broker, database_url, engine, tables
) -> None:
    broker = make_broker()
    async with broker:
        await broker.connect()
        assert await broker.publish("x", topic="orders.created") == []
        await cli(database_url, "topic", "bind", "orders.*", "billing")
        [message_id] = await broker.publish("y", topic="orders.created")
        await cli(database_url, "topic", "unbind", "orders.*", "billing")
        assert await broker.publish("z", topic="orders.created") == []

    async with QueueAdmin(database_url) as admin:
        found = await admin.inspect(message_id)
        assert (found.queue, found.topic) == ("billing", "orders.created")
    shown = (await cli(database_url, "inspect", str(message_id))).stdout
    assert "orders.created" in shown


async def test_a_rolled_back_outbox_publish_to_a_topic_leaves_no_copy(
    make_broker, database_url, engine, tables, business_table
) -> None:
    await _bind(database_url, ("orders.*", "billing"), ("orders.*", "audit"))
    broker = make_broker()
    async with broker:
        await broker.connect()
        async with AsyncSession(engine) as session:
            await session.execute(business_table.insert().values(id=1))
            ids = await broker.publish("x", topic="orders.created", connection=session)
            assert len(ids) == 2
            await session.rollback()
        assert await _copies(engine, tables) == []

        async with engine.connect() as conn:
            await conn.execute(business_table.insert().values(id=2))
            ids = await broker.publish_batch("a", "b", topic="orders.created", connection=conn)
            await conn.commit()
        assert sorted(r["id"] for r in await _copies(engine, tables)) == sorted(ids)
        assert len(ids) == 4


async def test_an_idempotency_key_deduplicates_per_bound_queue(
    make_broker, database_url, engine, tables
) -> None:
    await _bind(database_url, ("orders.*", "billing"))
    broker = make_broker()
    async with broker:
        await broker.connect()
        [billing_id] = await broker.publish("x", topic="orders.created", idempotency_key="k")
        await _bind(database_url, ("orders.*", "audit"))
        # billing holds the key already: its id comes back; audit gets its first copy
        audit_id, again = await broker.publish("x", topic="orders.created", idempotency_key="k")
        assert again == billing_id and audit_id != billing_id
        assert await broker.publish("x", topic="orders.created", idempotency_key="k") == [
            audit_id,
            billing_id,
        ]
        # the key's own queue keeps deduplicating a direct publish too
        assert await broker.publish("x", queue="audit", idempotency_key="k") == audit_id
        with pytest.raises(IdempotencyConflictError):
            await broker.publish("other", topic="orders.created", idempotency_key="k")
        assert len(await _copies(engine, tables)) == 2


async def test_backpressure_counts_every_copy_and_refuses_them_all(
    make_broker, database_url, engine, tables
) -> None:
    await _bind(database_url, ("orders.*", "small"), ("orders.*", "big"))
    broker = make_broker(max_queue_sizes={"small": 3, "big": 100})
    async with broker:
        await broker.connect()
        await broker.publish_batch(1, 2, topic="orders.created")
        with pytest.raises(QueueFullError, match="'small' is full"):
            await broker.publish_batch(3, 4, topic="orders.created")
        with pytest.raises(QueueFullError):  # in the caller's transaction too
            async with engine.begin() as conn:
                await broker.publish_batch(3, 4, topic="orders.created", connection=conn)
        assert len(await rows(engine, tables.message, tables.message.c.queue == "big")) == 2
        await broker.publish(3, topic="orders.created")  # exactly at the limit
        assert len(await _copies(engine, tables)) == 6


@pytest.mark.parametrize(
    ("arguments", "error", "problem"),
    [
        ({"topic": "orders.*"}, InvalidTopicError, "wildcard"),
        ({"topic": "orders..x"}, InvalidTopicError, "empty word"),
        ({"topic": "orders.x", "queue": "q"}, InvalidOptionError, "either a queue"),
    ],
)
async def test_bad_topics_are_refused_before_anything_is_written(
    database_url, engine, tables, arguments, error, problem
) -> None:
    await _bind(database_url, ("#", "q"))
    broker = SqlaBroker(database_url)
    async with broker:
        await broker.connect()
        with pytest.raises(error, match=problem):
            await broker.publish("x", **arguments)
        with pytest.raises(error, match=problem):
            await broker.publish_batch("x", "y", **arguments)
    assert await rows(engine, tables.message) == []
