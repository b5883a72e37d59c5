"""A publish to a topic writes one delivery per matching endpoint, beside the queues'
copies, in the same transaction; on every database."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from faststream_sqla.admin import QueueAdmin, TopicRoute
from faststream_sqla.exceptions import QueueFullError
from faststream_sqla.schema import DELIVERY_QUEUE
from tests.support.cli import cli, cli_json
from tests.support.helpers import rows

PUBLIC = "https://93.184.215.14/hook"


async def _deliveries(engine, tables) -> list[sa.RowMapping]:
    m = tables.message
    return await rows(engine, m, m.c.queue == DELIVERY_QUEUE)


async def _billing_and_three_endpoints(admin: QueueAdmin) -> None:
    """billing bound to orders.*; shop and crm take orders.created, ledger does not."""
    await admin.bind("orders.*", "billing")
    await admin.add_endpoint("shop", PUBLIC, topics=["orders.*", "orders.#"])
    await admin.add_endpoint("crm", PUBLIC, topics=["#.created"])
    await admin.add_endpoint("ledger", PUBLIC, topics=["payments.#"])


async def test_a_topic_reaches_each_matching_endpoint_once_after_the_queues(
    make_broker, database_url, engine, tables
) -> None:
    async with QueueAdmin(database_url) as admin:
        await _billing_and_three_endpoints(admin)
    broker = make_broker()
    async with broker:
        await broker.connect()
        ids = await broker.publish({"order": 1}, topic="orders.created")
    stored = {r["id"]: r for r in await rows(engine, tables.message)}
    # the queue's copy, then the endpoints' deliveries by endpoint name
    assert [(stored[i]["queue"], stored[i]["channel"]) for i in ids] == [
        ("billing", None), (DELIVERY_QUEUE, "crm"), (DELIVERY_QUEUE, "shop"),
    ]  # fmt: skip
    webhook_ids = [stored[i]["headers"]["webhook-id"] for i in ids[1:]]
    assert len(set(webhook_ids)) == 2 and all(w.startswith("msg_") for w in webhook_ids)
    assert all(stored[i]["topic"] == "orders.created" for i in ids)


async def test_a_topic_route_names_the_enabled_endpoints_a_publish_reaches(
    make_broker, database_url, engine, tables
) -> None:
    async with QueueAdmin(database_url) as admin:
        await _billing_and_three_endpoints(admin)
        await admin.add_endpoint("archive", PUBLIC, topics=["#"])
        await admin.disable_endpoint("archive")
        assert await admin.topic_route("orders.created") == TopicRoute(
            queues=["billing"], endpoints=["crm", "shop"]
        )
        assert (await admin.topic_route("orders")).endpoints == ["shop"]
        assert await admin.route("orders.created") == ["billing"]
        assert (await admin.topic_route("refunds")).endpoints == []
    broker = make_broker()
    async with broker:
        await broker.connect()
        await broker.publish({"order": 1}, topic="orders.created")
    delivered = [row["channel"] for row in await _deliveries(engine, tables)]
    assert sorted(delivered) == ["crm", "shop"]
    routed = await cli_json(database_url, "topic", "route", "orders.created")
    assert routed == {
        "topic": "orders.created",
        "queues": ["billing"],
        "endpoints": ["crm", "shop"],
    }
    table = (await cli(database_url, "topic", "route", "orders.created")).stdout
    assert "crm" in table and "shop" in table and "webhook endpoint" in table
    assert "ledger" not in table and "archive" not in table
    out = await cli(database_url, "topic", "route", "refunds")
    assert "no enabled endpoint subscribes" in out.stdout


async def test_a_rolled_back_outbox_publish_leaves_no_delivery(
    make_broker, database_url, engine, tables
) -> None:
    async with QueueAdmin(database_url) as admin:
        await admin.add_endpoint("shop", PUBLIC, topics=["orders.#"])
    broker = make_broker()
    async with broker:
        await broker.connect()
        async with AsyncSession(engine) as session:
            ids = await broker.publish("x", topic="orders.created", connection=session)
            assert len(ids) == 1
            await session.rollback()
    assert await _deliveries(engine, tables) == []


async def test_a_disabled_endpoint_gets_no_new_deliveries(
    make_broker, database_url, engine, tables
) -> None:
    async with QueueAdmin(database_url) as admin:
        await admin.add_endpoint("shop", PUBLIC, topics=["orders.#"])
        await admin.add_endpoint("crm", PUBLIC, topics=["orders.#"])
        await admin.disable_endpoint("crm")
    broker = make_broker()
    async with broker:
        await broker.connect()
        await broker.publish("x", topic="orders.created")
    assert [r["channel"] for r in await _deliveries(engine, tables)] == ["shop"]


async def test_an_idempotency_key_deduplicates_per_endpoint(
    make_broker, database_url, engine, tables
) -> None:
    async with QueueAdmin(database_url) as admin:
        await admin.add_endpoint("shop", PUBLIC, topics=["orders.#"])
        await admin.add_endpoint("crm", PUBLIC, topics=["orders.#"])
    broker = make_broker()
    async with broker:
        await broker.connect()
        first = await broker.publish("x", topic="orders.created", idempotency_key="order-1")
        again = await broker.publish("x", topic="orders.created", idempotency_key="order-1")
    assert first == again and len(first) == 2
    assert sorted(r["channel"] for r in await _deliveries(engine, tables)) == ["crm", "shop"]


async def test_backpressure_counts_the_deliveries_and_refuses_the_whole_publish(
    make_broker, database_url, engine, tables
) -> None:
    async with QueueAdmin(database_url) as admin:
        await admin.bind("orders.#", "billing")
        await admin.add_endpoint("shop", PUBLIC, topics=["orders.#"])
        await admin.add_endpoint("crm", PUBLIC, topics=["orders.#"])
    broker = make_broker(max_queue_sizes={DELIVERY_QUEUE: 4})
    async with broker:
        await broker.connect()
        await broker.publish_batch(1, 2, topic="orders.created")  # 4 deliveries: the limit
        with pytest.raises(QueueFullError, match="is full"):
            await broker.publish(3, topic="orders.created")
    # nothing of the refused publish, not even the queue's copy
    m = tables.message
    assert len(await rows(engine, m, m.c.queue == "billing")) == 2
    assert len(await _deliveries(engine, tables)) == 4
