"""Delivery options reach the row the same way from every publish call, and a batch
item (`Envelope`) carries options of its own."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from faststream_sqla import Envelope, MessageState, SqlaBroker, SqlaResponse
from faststream_sqla.exceptions import InvalidOptionError, MessageSerializationError
from tests.support.helpers import FAST, Recorder, handle_one, recording, rows, wait_until

LATER = datetime(2040, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


async def test_every_publish_call_stores_the_same_options(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    publisher = broker.publisher("q")
    async with broker:
        await broker.connect()
        ids = [
            await broker.publish("a", queue="q", next_attempt_at=LATER),
            *await broker.publish_batch("b", queue="q", next_attempt_at=LATER),
            await publisher.publish("c", next_attempt_at=LATER),
            *await publisher.publish_batch("d", next_attempt_at=LATER),
        ]
    stored = await rows(engine, tables.message)
    assert [r["id"] for r in stored] == ids
    assert {r["next_attempt_at"] for r in stored} == {LATER.replace(tzinfo=None)}


async def test_batch_items_carry_their_own_options(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    async with broker:
        await broker.connect()
        ids = await broker.publish_batch(
            "plain",
            Envelope("own time", next_attempt_at=LATER, headers={"k": "item"}),
            Envelope("own id", correlation_id="mine"),
            "plain again",
            queue="q",
            headers={"k": "call", "shared": "yes"},
            correlation_id="call",
            delay=3600,
        )
    stored = {r["id"]: r for r in await rows(engine, tables.message)}
    assert list(stored) == ids
    plain, own_time, own_id, plain_again = (stored[i] for i in ids)
    assert own_time["next_attempt_at"] == LATER.replace(tzinfo=None)
    assert own_time["headers"]["k"] == "item" and own_time["headers"]["shared"] == "yes"
    assert plain["headers"]["k"] == "call" and plain_again["headers"]["k"] == "call"
    assert own_id["correlation_id"] == "mine"
    assert plain["correlation_id"] == plain_again["correlation_id"] == "call"
    # the call's delay holds for the items that set no time of their own
    hour = timedelta(hours=1)
    for row in (plain, own_id, plain_again):
        assert row["next_attempt_at"] - row["created_at"] >= hour - timedelta(seconds=1)
        assert row["next_attempt_at"] < LATER.replace(tzinfo=None)


@pytest.mark.parametrize(
    ("item", "error"),
    [
        (Envelope("x", delay=-1), InvalidOptionError),
        (Envelope("x", next_attempt_at=datetime(2040, 1, 1)), InvalidOptionError),  # naive
        (Envelope("x", headers={"k": object()}), MessageSerializationError),
        (Envelope("x", correlation_id="c" * 256), InvalidOptionError),
        (Envelope(object()), MessageSerializationError),
    ],
    ids=["negative delay", "naive time", "headers", "long correlation id", "body"],
)
async def test_a_bad_batch_item_fails_the_whole_batch_before_writing(
    database_url, engine, tables, item, error
):
    broker = SqlaBroker(database_url)
    async with broker:
        await broker.connect()
        with pytest.raises(error):
            await broker.publish_batch("good", item, "good", queue="q")
    assert await rows(engine, tables.message) == []


async def test_a_response_carries_options_to_the_reply(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber("in", **FAST)
    @broker.publisher("out")
    async def handle(body: str) -> SqlaResponse:
        got.record(body)
        return SqlaResponse(f"re: {body}", headers={"r": "1"}, next_attempt_at=LATER)

    await handle_one(broker, got, "hi", queue="in")

    async def reply_stored() -> list:
        return await rows(engine, tables.message, tables.message.c.queue == "out")

    await wait_until(reply_stored)
    (reply,) = await reply_stored()
    assert reply["next_attempt_at"] == LATER.replace(tzinfo=None)
    assert reply["headers"]["r"] == "1"


def test_an_unknown_option_is_a_type_error():
    with pytest.raises(TypeError, match="priorty"):
        Envelope("x", priorty=5)  # type: ignore[call-arg]


# -- expiry ---------------------------------------------------------------------------


async def test_an_expired_message_never_reaches_a_handler(make_broker, engine, tables):
    broker = make_broker()
    got = recording(broker, "q", record=lambda body, msg: (body, msg.expires_at))

    past = datetime.now(timezone.utc) - timedelta(seconds=1)
    async with broker:
        await broker.connect()
        stale, stale_item, _ = await broker.publish_batch(
            "stale", Envelope("stale item", ttl=0), "fresh", queue="q", expires_at=past
        )
        fresh = await broker.publish("fresh one", queue="q", ttl=timedelta(hours=1))
        await broker.start()
        (body, expires_at), = await got.wait_for(1)
        await wait_until(lambda: _archived(engine, tables, 4))

    assert body == "fresh one" and expires_at.tzinfo is timezone.utc
    by_id = {r["id"]: r for r in await rows(engine, tables.archive)}
    assert by_id[fresh]["state"] == MessageState.COMPLETED
    for message_id in (stale, stale_item):
        assert by_id[message_id]["state"] == MessageState.EXPIRED
        assert by_id[message_id]["attempts_count"] == 0
    assert got.calls == [(body, expires_at)]


async def _archived(engine, tables, n: int) -> bool:
    return len(await rows(engine, tables.archive)) >= n


@pytest.mark.parametrize(
    "options",
    [
        {"expires_at": datetime(2040, 1, 1)},  # naive
        {"expires_at": LATER, "ttl": 5},
        {"ttl": -1},
        {"ttl": float("nan")},
        {"next_attempt_at": datetime.max.replace(tzinfo=timezone(timedelta(hours=-5)))},
        {"expires_at": "tomorrow"},
    ],
    ids=["naive", "both", "negative", "nan", "past the last date", "not a time"],
)
async def test_bad_expiry_is_refused_before_writing(database_url, engine, tables, options):
    broker = SqlaBroker(database_url)
    async with broker:
        await broker.connect()
        with pytest.raises(InvalidOptionError):
            await broker.publish("x", queue="q", **options)
    assert await rows(engine, tables.message) == []
