"""Publish and consume on every database: bodies, metadata, batches, delays."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from pydantic import BaseModel

from faststream_sqla import MessageState, SqlaBroker, SqlaMessage
from tests.support.helpers import FAST, Recorder, recording, rows


class Order(BaseModel):
    id: int
    item: str


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("hello", "hello"),
        (b"\x00\x01raw", b"\x00\x01raw"),
        ({"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 2]}),
    ],
    ids=["str", "bytes", "dict"],
)
async def test_body_round_trip(database_url, engine, tables, body, expected):
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber("q", **FAST)
    async def handle(payload, msg: SqlaMessage) -> None:
        got.record((payload, msg))

    async with broker:
        await broker.start()
        message_id = await broker.publish(body, queue="q", headers={"h": "v"}, correlation_id="c-1")
        (payload, msg), = await got.wait_for(1)

    assert payload == expected
    assert msg.message_id == message_id
    assert msg.queue == "q"
    assert msg.headers["h"] == "v"
    assert msg.correlation_id == "c-1"
    assert msg.deliveries_count == 1
    assert msg.attempts_count == 0
    assert msg.created_at.tzinfo is timezone.utc
    (row,) = await rows(engine, tables.archive)
    assert row["id"] == message_id
    assert row["state"] == MessageState.COMPLETED
    assert row["attempts_count"] == 1
    assert row["first_attempt_at"] >= row["created_at"]
    assert row["archived_at"] >= row["first_attempt_at"]
    assert await rows(engine, tables.message) == []


async def test_pydantic_body_and_batch_ids(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber("orders", max_workers=3, **FAST)
    async def handle(order: Order) -> None:
        got.record(order)

    async with broker:
        await broker.start()
        ids = await broker.publish_batch(
            *(Order(id=i, item=f"i{i}") for i in range(5)), queue="orders"
        )
        await got.wait_for(5)

    assert len(ids) == 5 and ids == sorted(ids) and len(set(ids)) == 5
    assert sorted(o.id for o in got.calls) == list(range(5))
    assert [r["id"] for r in await rows(engine, tables.archive)] == ids


async def test_publisher_object_and_handler_return_value(database_url):
    broker = SqlaBroker(database_url)
    got = Recorder()
    out = broker.publisher("out")

    @broker.subscriber("in", **FAST)
    @out
    async def double(n: int) -> int:
        return n * 2

    @broker.subscriber("out", **FAST)
    async def collect(n: int) -> None:
        got.record(n)

    async with broker:
        await broker.start()
        await out.publish_batch(1, queue="in")
        await broker.publish(5, queue="in")
        await got.wait_for(2)
    assert sorted(got.calls) == [2, 10]


async def test_delayed_delivery_waits_for_next_attempt_at(make_broker, engine, tables):
    broker = make_broker()
    got = recording(
        broker, "q", record=lambda body, msg: (body, msg.created_at, msg.next_attempt_at)
    )

    async with broker:
        await broker.start()
        later = datetime.now(timezone.utc) + timedelta(hours=1)
        await broker.publish("later", queue="q", next_attempt_at=later)
        # a delay well beyond the next publish, so a slow host cannot make "soon" due
        # before "now" is stored
        await broker.publish("soon", queue="q", delay=1.0)
        await broker.publish("now", queue="q")
        await got.wait_for(2)

    assert [c[0] for c in got.calls] == ["now", "soon"]
    _, created, eligible = got.calls[1]
    assert eligible - created >= timedelta(seconds=0.99)
    (pending,) = await rows(engine, tables.message)
    assert pending["state"] == MessageState.PENDING
    assert abs(pending["next_attempt_at"] - later.replace(tzinfo=None)) < timedelta(milliseconds=1)


async def test_sixteen_mebibyte_payload_fits(make_broker, engine, tables):
    # MariaDB needs max_allowed_packet >= 64 MiB for this (.ci/run sets it; docs say why).
    body = bytes(range(256)) * (16 * 1024 * 1024 // 256)
    broker = make_broker()
    got = recording(broker, "big", body=bytes)

    async with broker:
        await broker.start()
        await broker.publish(body, queue="big")
        await got.wait_for(1)
    assert got.calls[0] == body
    (row,) = await rows(engine, tables.archive)
    assert len(row["payload"]) == len(body)


@pytest.mark.databases("mysql")
async def test_message_over_mariadb_packet_limit_is_refused_whole(server_databases, tables):
    from sqlalchemy.ext.asyncio import create_async_engine

    from faststream_sqla.exceptions import MessageTooLargeError

    url = server_databases["mysql"]
    broker = SqlaBroker(url)
    async with broker:
        await broker.connect()
        too_big = b"\x00" * broker.config.driver.max_packet
        with pytest.raises(MessageTooLargeError, match="max_allowed_packet"):
            await broker.publish_batch(b"small", too_big, queue="huge")
    engine = create_async_engine(url)
    assert await rows(engine, tables.message, tables.message.c.queue == "huge") == []
    await engine.dispose()
