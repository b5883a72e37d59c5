"""Error classes: RetryAfter sets the retry's delay, permanent errors and bad bodies fail
at once, and last_error starts with the exception's type and message."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import BaseModel

from faststream_sqla import MessageState, SqlaBroker, SqlaMessage
from faststream_sqla.exceptions import InvalidOptionError, RetryAfter, SqlaBrokerError
from faststream_sqla.retry import ConstantRetryStrategy
from tests.support.helpers import FAST, Recorder, one_handled, rows, wait_until

#: without the error classes, every failure here would be retried at once, 5 times
RETRY_AT_ONCE = ConstantRetryStrategy(delay_seconds=0, max_attempts=5)
DAY = timedelta(hours=24)


class Order(BaseModel):
    id: int


async def _settled(engine, tables, message_id: int, *, archived: bool) -> dict:
    table = tables.archive if archived else tables.message

    async def written() -> bool:
        found = await rows(engine, table, table.c.id == message_id)
        return bool(found) and (archived or found[0]["attempts_count"] > 0)

    await wait_until(written)
    (row,) = await rows(engine, table, table.c.id == message_id)
    return dict(row)


@pytest.mark.parametrize(
    ("raised", "expected"), [(RetryAfter(120), timedelta(seconds=120)), (RetryAfter(10**7), DAY)]
)
async def test_retry_after_sets_the_delay_capped_at_a_day(
    database_url, engine, tables, raised, expected
):
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber("q", retry_strategy=RETRY_AT_ONCE, **FAST)
    async def handle(body: str) -> None:
        got.record(body)
        raise raised

    async with one_handled(broker, got) as message_id:
        row = await _settled(engine, tables, message_id, archived=False)

    assert row["state"] == MessageState.RETRYABLE and row["attempts_count"] == 1
    waited = row["next_attempt_at"] - row["last_attempt_at"]
    assert expected <= waited < expected + timedelta(seconds=5)
    assert row["last_error"].startswith(f"RetryAfter: retry after {expected.total_seconds():g}s")


async def test_a_nack_delay_is_capped_at_a_day(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber("q", retry_strategy=RETRY_AT_ONCE, **FAST)
    async def handle(body: str, msg: SqlaMessage) -> None:
        got.record(body)
        await msg.nack(delay=10**7)

    async with one_handled(broker, got) as message_id:
        row = await _settled(engine, tables, message_id, archived=False)
    waited = row["next_attempt_at"] - row["last_attempt_at"]
    assert DAY <= waited < DAY + timedelta(seconds=5)


class PaymentDeclined(Exception):
    pass


async def test_a_permanent_exception_fails_without_retries(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber(
        "q", retry_strategy=RETRY_AT_ONCE, permanent_exceptions=[PaymentDeclined], **FAST
    )
    async def handle(body: str) -> None:
        got.record(body)
        raise PaymentDeclined("card 4242 declined")

    async with one_handled(broker, got) as message_id:
        row = await _settled(engine, tables, message_id, archived=True)
    assert got.calls == ["x"]
    assert (row["state"], row["attempts_count"]) == (MessageState.FAILED, 1)
    assert row["last_error"].startswith("PaymentDeclined: card 4242 declined")


async def test_a_body_that_fails_the_model_is_not_retried(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber("q", retry_strategy=RETRY_AT_ONCE, **FAST)
    async def handle(order: Order) -> None:
        got.record(order)

    async with broker:
        await broker.start()
        bad = await broker.publish({"id": "not a number"}, queue="q")
        good = await broker.publish({"id": 7}, queue="q")
        await got.wait_for(1)
        row = await _settled(engine, tables, bad, archived=True)
        await _settled(engine, tables, good, archived=True)
    assert got.calls == [Order(id=7)]
    assert (row["state"], row["attempts_count"]) == (MessageState.FAILED, 1)
    assert "ValidationError" in row["last_error"].splitlines()[0]


@pytest.mark.parametrize("value", [-1, float("nan"), float("inf"), "5", True])
def test_retry_after_refuses_a_bad_delay(value):
    with pytest.raises(InvalidOptionError):
        RetryAfter(value)


def test_bad_permanent_exceptions_are_refused_when_subscribing():
    broker = SqlaBroker("sqlite+aiosqlite:///:memory:")
    with pytest.raises(InvalidOptionError, match="permanent_exceptions"):
        broker.subscriber("q", permanent_exceptions=["KeyError"])  # type: ignore[list-item]


def test_every_error_shares_one_base_and_is_importable_from_the_package():
    import faststream_sqla
    from faststream_sqla import exceptions

    errors = [
        value for value in vars(exceptions).values()
        if isinstance(value, type) and issubclass(value, Exception)
    ]
    assert len(errors) > 5
    for error in errors:
        assert issubclass(error, SqlaBrokerError)
        assert getattr(faststream_sqla, error.__name__) is error
