"""Priority (higher first) and ordering keys (one at a time per key, in publish order)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from faststream_sqla import Envelope, MessageState, SqlaBroker
from faststream_sqla.drivers.base import sort_in_claim_order
from faststream_sqla.exceptions import InvalidOptionError, QueueFullError
from faststream_sqla.message import ClaimedMessage
from faststream_sqla.retry import ConstantRetryStrategy
from tests.support.helpers import FAST, Recorder, recording, rows, wait_until

_T0 = datetime(2026, 1, 1)


def _claimed(id_: int, priority: int, due_seconds: int) -> ClaimedMessage:
    due = _T0 + timedelta(seconds=due_seconds)
    return ClaimedMessage(id_, "q", {}, b"", 0, 1, _T0, due, _T0, priority=priority)


@given(
    st.lists(
        st.tuples(st.integers(0, 10), st.integers(0, 3)), min_size=0, max_size=30
    ).map(lambda specs: [_claimed(i, p, d) for i, (p, d) in enumerate(specs)]),
    st.randoms(use_true_random=False),
)
def test_claimed_messages_sort_higher_priority_first_then_due_then_id(messages, rng) -> None:
    def claim_order(m: ClaimedMessage) -> tuple:
        return (-m.priority, m.next_attempt_at, m.id)

    expected = [m.id for m in sorted(messages, key=claim_order)]
    rng.shuffle(messages)
    sort_in_claim_order(messages)
    assert [m.id for m in messages] == expected


async def test_a_claim_takes_higher_priorities_first(database_url, engine, tables, driver):
    broker = SqlaBroker(database_url)
    async with broker:
        await broker.connect()
        # Published lowest first, so id order alone would give the opposite answer;
        # a not yet due message of the top priority must not hold the others back.
        ids = await broker.publish_batch(
            *(Envelope(f"p{p}", priority=p) for p in (0, 3, 10, 3, 7, 0)),
            Envelope("later", priority=10, delay=3600),
            queue="q",
        )
    claimed = await driver.claim(engine, "q", 4)
    by_id = dict(zip(ids, (0, 3, 10, 3, 7, 0, 10)))
    assert [(m.id, by_id[m.id]) for m in claimed] == [
        (ids[2], 10), (ids[4], 7), (ids[1], 3), (ids[3], 3)
    ]
    rest = await driver.claim(engine, "q", 10)
    assert [m.id for m in rest] == [ids[0], ids[5]]  # "later" is not due


async def test_handlers_see_the_priority_and_it_is_archived(make_broker, engine, tables):
    broker = make_broker()
    got = recording(broker, "q", max_workers=1, record=lambda body, msg: (body, msg.priority))

    async with broker:
        await broker.connect()
        await broker.publish("low", queue="q")
        await broker.publish("high", queue="q", priority=9)
        await broker.start()
        assert sorted(await got.wait_for(2)) == [("high", 9), ("low", 0)]

    archive = await rows(engine, tables.archive)
    assert sorted(r["priority"] for r in archive) == [0, 9]


@pytest.mark.parametrize("value", [-1, 11, 2.5, True, "five", "12"])
async def test_a_priority_out_of_range_is_refused_before_writing(
    database_url, engine, tables, value
):
    broker = SqlaBroker(database_url)
    async with broker:
        await broker.connect()
        with pytest.raises(InvalidOptionError, match="priority") as raised:
            await broker.publish_batch("ok", Envelope("bad", priority=value), queue="q")
    assert isinstance(raised.value, ValueError)
    assert await rows(engine, tables.message) == []


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"ordering_key": ""}, "ordering_key must be 1 to 255"),
        ({"ordering_key": "k" * 256}, "ordering_key must be 1 to 255"),
        ({"ordering_key": 7}, "ordering_key must be a str"),
        ({"idempotency_key": "a\x00b"}, "idempotency_key must not contain NUL"),
    ],
)
async def test_a_bad_key_is_refused_before_writing(database_url, engine, tables, options, match):
    broker = SqlaBroker(database_url)
    async with broker:
        await broker.connect()
        with pytest.raises(InvalidOptionError, match=match):
            await broker.publish("x", queue="q", **options)
    assert await rows(engine, tables.message) == []


async def test_one_claim_takes_only_the_first_message_of_a_key(
    database_url, engine, tables, driver
):
    broker = SqlaBroker(database_url)
    async with broker:
        await broker.connect()
        ids = await broker.publish_batch(
            Envelope("a1", ordering_key="a"),
            Envelope("b1", ordering_key="b"),
            Envelope("a2", ordering_key="a"),
            "free",
            Envelope("b2", ordering_key="b"),
            queue="q",
        )
    first = await driver.claim(engine, "q", 10)
    assert [m.id for m in first] == [ids[0], ids[1], ids[3]]
    # a1 and b1 are in flight: their keys' next messages wait
    assert await driver.claim(engine, "q", 10) == []


async def test_messages_of_a_key_run_one_at_a_time_in_order(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    keys, per_key = 4, 10
    running: dict[str, int] = defaultdict(int)
    overlaps: list[str] = []
    order: dict[str, list[int]] = defaultdict(list)
    got = Recorder()

    @broker.subscriber("q", max_workers=8, **FAST)
    async def handle(body: dict) -> None:
        key = body["key"]
        running[key] += 1
        if running[key] > 1:
            overlaps.append(key)
        order[key].append(body["seq"])
        await asyncio.sleep(0)  # let another worker run, if one had the same key
        running[key] -= 1
        got.record(key)

    async with broker:
        await broker.connect()
        await broker.publish_batch(
            *(
                Envelope({"key": f"k{k}", "seq": s}, ordering_key=f"k{k}")
                for s in range(per_key)
                for k in range(keys)
            ),
            queue="q",
        )
        await broker.start()
        await got.wait_for(keys * per_key)

    assert overlaps == []
    assert dict(order) == {f"k{k}": list(range(per_key)) for k in range(keys)}


async def test_a_retrying_message_holds_its_key_until_it_fails(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber(
        "q", max_workers=4,
        retry_strategy=ConstantRetryStrategy(delay_seconds=0.05, max_attempts=3), **FAST,
    )
    async def handle(body: str) -> None:
        got.record(body)
        if body == "poison":
            raise ValueError("cannot handle it")

    async with broker:
        await broker.connect()
        await broker.publish_batch(
            Envelope("poison", ordering_key="k"), Envelope("next", ordering_key="k"), queue="q"
        )
        await broker.start()
        # three attempts of the head, retried, before the key moves on
        assert await got.wait_for(4) == ["poison", "poison", "poison", "next"]

    archive = {r["payload"]: r["state"] for r in await rows(engine, tables.archive)}
    assert archive == {b"poison": MessageState.FAILED, b"next": MessageState.COMPLETED}


async def test_a_key_moves_on_after_its_message_expires(make_broker, engine, tables):
    broker = make_broker()
    got = recording(broker, "q")

    async with broker:
        await broker.connect()
        await broker.publish("gone", queue="q", ordering_key="k", ttl=0)
        await broker.publish("kept", queue="q", ordering_key="k")
        await broker.start()
        assert await got.wait_for(1) == ["kept"]

    async def both_archived() -> bool:
        return len(await rows(engine, tables.archive)) == 2

    await wait_until(both_archived)
    states = {r["payload"]: r["state"] for r in await rows(engine, tables.archive)}
    assert states == {b"gone": MessageState.EXPIRED, b"kept": MessageState.COMPLETED}


async def test_later_messages_of_a_key_wait_outside_the_claim_until_their_turn(
    database_url, make_broker, engine, tables, driver
):
    broker = SqlaBroker(database_url, max_queue_size=4)
    async with broker:
        await broker.connect()
        ids = await broker.publish_batch(
            Envelope("a1", ordering_key="a"), Envelope("a2", ordering_key="a"), queue="q"
        )
        async with broker.engine.connect() as conn, conn.begin():
            ids.append(await broker.publish("a3", queue="q", ordering_key="a", connection=conn))
        ids.append(await broker.publish("b1", queue="q", ordering_key="b"))
        # waiting messages count against the queue's limit like any other
        with pytest.raises(QueueFullError):
            await broker.publish("one more", queue="q")
    states = {r["id"]: r["state"] for r in await rows(engine, tables.message)}
    assert [states[i] for i in ids] == [
        MessageState.PENDING, MessageState.WAITING, MessageState.WAITING, MessageState.PENDING
    ]

    consumer = make_broker()
    got = recording(consumer, "q")

    async with consumer:
        await consumer.start()
        calls = await got.wait_for(4)
    assert [c for c in calls if c.startswith("a")] == ["a1", "a2", "a3"]


async def test_a_waiting_first_message_of_a_key_is_released_by_the_sweep(
    make_broker, engine, tables
):
    # what a publisher that died between its commit and its release leaves behind
    broker = make_broker()
    got = recording(broker, "q", release_stuck_interval=0.05)

    async with broker:
        await broker.connect()
        (first,) = await broker.publish_batch(Envelope("stranded", ordering_key="k"), queue="q")
        async with engine.begin() as conn:
            await conn.execute(
                tables.message.update()
                .where(tables.message.c.id == first)
                .values(state=MessageState.WAITING)
            )
        await broker.start()
        assert await got.wait_for(1) == ["stranded"]


async def test_a_publish_that_races_the_archive_before_it_is_released_by_its_publisher(
    database_url, engine, tables, driver, dialect_name
):
    """The archive's release runs before the new message commits, so it cannot see it;
    the publisher's release after its commit must then set it PENDING. (SQLite's one
    writer cannot interleave them: there the archive waits for the publish's commit and
    its release finds the new message.)"""
    from faststream_sqla import lifecycle, ordering
    
    broker = SqlaBroker(database_url)
    async with broker:
        await broker.connect()
        head_id = await broker.publish("head", queue="q", ordering_key="k")
        (head,) = await driver.claim(engine, "q", 10)
        async with broker.engine.connect() as conn:
            async with conn.begin():
                racer = await broker.publish(
                    "racer", queue="q", ordering_key="k", connection=conn
                )
                if dialect_name != "sqlite":
                    # meanwhile a consumer archives the head and releases the key's
                    # next message, which it cannot see yet
                    assert await driver.write_outcomes(
                        engine, [lifecycle.completed(head, head.acquired_at)]
                    ) == 1
                    assert await ordering.release_next(driver, engine, {("q", "k")}) == 0
        if dialect_name == "sqlite":
            assert await driver.write_outcomes(
                engine, [lifecycle.completed(head, head.acquired_at)]
            ) == 1
            # this or the publisher's own release, whichever runs after the archive
            await ordering.release_next(driver, engine, {("q", "k")})

        async def released() -> bool:
            stored = await rows(engine, tables.message, tables.message.c.id == racer)
            return stored[0]["state"] == MessageState.PENDING

        await wait_until(released)
    assert [r["id"] for r in await rows(engine, tables.archive)] == [head_id]


async def test_keys_that_differ_in_case_or_trailing_spaces_are_different_keys(
    database_url, engine, tables
):
    """MySQL and MariaDB compare text case-blind and ignore trailing spaces unless told
    otherwise (migration 0007): the keys must compare as PostgreSQL and SQLite do."""
    async with SqlaBroker(database_url) as broker:
        ids = [
            await broker.publish("same body", queue="q", idempotency_key=key)
            for key in ("Key", "key", "key ")
        ]
        assert len(set(ids)) == 3
        assert await broker.publish("same body", queue="q", idempotency_key="key ") == ids[2]
        ordered = await broker.publish_batch(
            Envelope(1, ordering_key="A"), Envelope(2, ordering_key="a"), queue="k"
        )
    # different keys: both first of their key, so neither waits behind the other
    held = await rows(engine, tables.message, tables.message.c.id.in_(ordered))
    assert {row["state"] for row in held} == {MessageState.PENDING}
