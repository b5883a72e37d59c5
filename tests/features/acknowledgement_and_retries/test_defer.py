"""SqlaMessage.defer: a handler gives its message back for later, with a saved state,
without spending an attempt; on every database."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from faststream_sqla import InvalidOptionError, MessageState, SqlaBroker, SqlaMessage
from faststream_sqla.clock import utc_now
from faststream_sqla.drivers.base import Outcome
from faststream_sqla.message import KEEP_STATE, MAX_SAVED_STATE_BYTES, encode_saved_state
from faststream_sqla.retry import NoRetryStrategy

from tests.support.helpers import FAST, Recorder, rows


async def test_job_in_steps_keeps_its_state_and_spends_no_attempt(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    seen = Recorder()

    # NoRetryStrategy: a single failed attempt would end the message FAILED, so
    # deferring three times and completing shows no deferral counted as one.
    @broker.subscriber("steps", retry_strategy=NoRetryStrategy(), **FAST)
    async def step(body: str, msg: SqlaMessage) -> None:
        seen.record((msg.state, msg.attempts_count, msg.deliveries_count))
        done = (msg.state or {}).get("done", 0)
        if done < 3:
            await msg.defer(state={"done": done + 1, "cursor": f"page-{done + 1}"})

    async with broker:
        await broker.start()
        (message_id,) = await broker.publish_batch("job", queue="steps")
        calls = await seen.wait_for(4)

    assert calls == [
        (None, 0, 1),
        ({"done": 1, "cursor": "page-1"}, 0, 2),
        ({"done": 2, "cursor": "page-2"}, 0, 3),
        ({"done": 3, "cursor": "page-3"}, 0, 4),
    ]
    (archived,) = await rows(engine, tables.archive)
    assert (archived["id"], archived["state"], archived["attempts_count"]) == (
        message_id, MessageState.COMPLETED, 1
    )


async def test_bytes_state_is_kept_when_left_out_and_cleared_by_none(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    seen = Recorder()
    plan = {1: {"state": b"\x00raw\xff"}, 2: {}, 3: {"state": None}}

    @broker.subscriber("bytes", **FAST)
    async def step(body: str, msg: SqlaMessage) -> None:
        seen.record(msg.state)
        if msg.deliveries_count in plan:
            await msg.defer(**plan[msg.deliveries_count])

    async with broker:
        await broker.start()
        await broker.publish("job", queue="bytes")
        assert await seen.wait_for(4) == [None, b"\x00raw\xff", b"\x00raw\xff", None]


async def test_deferred_message_waits_its_delay_and_keeps_its_last_error(
    database_url, engine, tables
):
    broker = SqlaBroker(database_url)
    seen = Recorder()

    @broker.subscriber("later", **FAST)
    async def step(body: str, msg: SqlaMessage) -> None:
        seen.record(msg.deliveries_count)
        if msg.deliveries_count == 1:
            raise RuntimeError("first try fails")
        await msg.defer(delay=3600, state=[1, 2])

    async with broker:
        await broker.start()
        (message_id,) = await broker.publish_batch("job", queue="later")
        await seen.wait_for(2)
    # Leaving the block stopped the broker, which flushed the outcome.
    (row,) = await rows(engine, tables.message)
    async with engine.connect() as conn:
        now = await conn.scalar(sa.select(utc_now()))
    assert row["id"] == message_id
    assert row["state"] == MessageState.PENDING
    assert row["attempts_count"] == 1  # the failure counted, the deferral did not
    assert row["acquired_at"] is None
    assert "first try fails" in row["last_error"]
    assert 3500 < (row["next_attempt_at"] - now).total_seconds() <= 3600
    assert encode_saved_state([1, 2]) == bytes(row["saved_state"])


async def test_a_lapsed_claim_saves_no_state(database_url, engine, tables, driver):
    (message_id,) = await _publish(database_url, "fenced")
    async with engine.begin() as conn:  # claimed once: claims_count 1
        await conn.execute(
            tables.message.update().values(
                state=MessageState.PROCESSING, claims_count=1, acquired_at=utc_now()
            )
        )
    state = encode_saved_state({"step": 1})

    def outcome(token: int) -> Outcome:
        return Outcome(message_id, token, MessageState.PENDING, 0, 1, saved_state=state)

    assert await driver.save_states(engine, [outcome(token=2)]) == 0
    (row,) = await rows(engine, tables.message)
    assert row["saved_state"] is None
    assert await driver.save_states(engine, [outcome(token=1)]) == 1
    (row,) = await rows(engine, tables.message)
    assert bytes(row["saved_state"]) == state


async def _publish(database_url: str, queue: str) -> list[int]:
    async with SqlaBroker(database_url) as broker:
        return await broker.publish_batch("job", queue=queue)


@pytest.mark.parametrize(
    ("state", "problem"),
    [
        (object(), "bytes or JSON-serialisable"),
        ({"x": float("nan")}, "bytes or JSON-serialisable"),
        (b"x" * (MAX_SAVED_STATE_BYTES + 1), "the limit is"),
    ],
)
async def test_bad_state_is_refused_before_anything_is_written(state, problem):
    with pytest.raises(InvalidOptionError, match=problem):
        encode_saved_state(state)


async def test_bad_defer_fails_the_attempt_not_the_worker(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    seen = Recorder()

    @broker.subscriber("bad", **FAST)
    async def step(body: str, msg: SqlaMessage) -> None:
        seen.record(msg.deliveries_count)
        if msg.deliveries_count == 1:
            await msg.defer(delay=-1)
        await msg.defer(state=KEEP_STATE)

    async with broker:
        await broker.start()
        await broker.publish("job", queue="bad")
        assert await seen.wait_for(1) == [1]
    (row,) = await rows(engine, tables.message)
    assert row["attempts_count"] == 1 and "defer delay must be" in row["last_error"]
