"""`broker.subscriber(queue, topics=[...])`: the queue is bound to the patterns when the
broker starts (again harmlessly at every start, a router's prefix included), stays
bound after it stops, and shows them in AsyncAPI; the test client routes topics in
memory. On every database."""

from __future__ import annotations

import pytest

from faststream_sqla import InvalidTopicError, SqlaBroker, SqlaMessage, SqlaRouter, TestSqlaBroker
from faststream_sqla.admin import QueueAdmin
from tests.support.helpers import Recorder


async def test_subscriber_topics_are_bound_at_start_and_kept_after_stop(
    make_broker, database_url
) -> None:
    got = Recorder()

    def declare(broker: SqlaBroker) -> None:
        router = SqlaRouter(prefix="eu-")

        @broker.subscriber("billing", topics=["orders.*", "refunds.#"])
        @router.subscriber("audit", topics="#")
        async def handle(body: str, msg: SqlaMessage) -> None:
            got.record((msg.queue, msg.topic, body))

        broker.include_router(router)

    broker = make_broker()
    declare(broker)
    async with broker:
        await broker.start()
        ids = await broker.publish("paid", topic="orders.paid")
        assert len(ids) == 2
        await got.wait_for(2)
        assert sorted(got.calls) == [
            ("billing", "orders.paid", "paid"),
            ("eu-audit", "orders.paid", "paid"),
        ]

    async with QueueAdmin(database_url) as admin:
        bound = [(b.pattern, b.queue) for b in await admin.bindings()]
        assert bound == [("#", "eu-audit"), ("orders.*", "billing"), ("refunds.#", "billing")]

    again = make_broker()
    declare(again)
    async with again:
        await again.start()  # binding again changes nothing
    async with QueueAdmin(database_url) as admin:
        assert len(await admin.bindings()) == 3
        assert await admin.route("refunds") == ["billing", "eu-audit"]


def test_malformed_subscriber_topics_are_refused_when_declared() -> None:
    broker = SqlaBroker("sqlite+aiosqlite:///:memory:")
    with pytest.raises(InvalidTopicError, match="mixes a wildcard"):
        broker.subscriber("q", topics=["orders.cre*"])
    with pytest.raises(InvalidTopicError, match="must be a str"):
        broker.subscriber("q", topics=[5])  # type: ignore[list-item]


def test_asyncapi_names_the_topics_of_a_queue() -> None:
    from faststream.specification import AsyncAPI

    broker = SqlaBroker("sqlite+aiosqlite:///:memory:")

    @broker.subscriber("billing", topics=["orders.*"], description="Bills orders.")
    async def handle(body: str) -> None: ...

    schema = AsyncAPI(broker).to_specification().to_jsonable()
    [channel] = schema["channels"].values()
    assert "orders.*" in channel["description"] and "Bills orders." in channel["description"]


async def test_the_test_client_routes_topics_through_subscriber_topics() -> None:
    broker = SqlaBroker("sqlite+aiosqlite:///:memory:")
    seen: list[tuple[str, str | None]] = []

    @broker.subscriber("billing", topics=["orders.*"])
    @broker.subscriber("audit", topics=["#"])
    async def handle(body: str, msg: SqlaMessage) -> None:
        seen.append((msg.queue, msg.topic))

    async with TestSqlaBroker(broker) as test_broker:
        ids = await test_broker.publish("x", topic="orders.created")
        assert len(ids) == 2
        assert await test_broker.publish("x", topic="users") != []
    assert sorted(seen) == [
        ("audit", "orders.created"),
        ("audit", "users"),
        ("billing", "orders.created"),
    ]
