"""What each handler result writes: ack policies, manual decisions, retries, poison."""

from __future__ import annotations

import pytest
from faststream import AckPolicy
from faststream.exceptions import AckMessage, NackMessage, RejectMessage

from faststream_sqla import MessageState, SqlaBroker, SqlaMessage
from faststream_sqla.clock import utc_now
from faststream_sqla.retry import ConstantRetryStrategy, NoRetryStrategy
from tests.support.helpers import FAST, Recorder, handle_one, one_handled, rows

RETRY_TWICE = ConstantRetryStrategy(delay_seconds=0, max_attempts=3)


async def _run_once(database_url, behaviour, *, ack_policy, retry_strategy=NoRetryStrategy()):
    """Publish one message, run the handler once, stop, return where the row ended."""
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber("q", ack_policy=ack_policy, retry_strategy=retry_strategy, **FAST)
    async def handle(body: str, msg: SqlaMessage) -> None:
        got.record(msg)
        await behaviour(msg)

    await handle_one(broker, got)
    return broker


async def _raise(msg: SqlaMessage) -> None:
    raise ValueError("boom")


async def _ok(msg: SqlaMessage) -> None:
    return None


async def _ack_then_raise(msg: SqlaMessage) -> None:
    await msg.ack()
    raise ValueError("after ack")


async def _reject(msg: SqlaMessage) -> None:
    await msg.reject()


async def _nack(msg: SqlaMessage) -> None:
    await msg.nack(delay=3600)


async def _raise_ack(msg: SqlaMessage) -> None:
    raise AckMessage


async def _raise_nack(msg: SqlaMessage) -> None:
    raise NackMessage


async def _raise_reject(msg: SqlaMessage) -> None:
    raise RejectMessage


# (behaviour, ack policy) -> state the row ends in; retries are allowed (delay 1h)
MATRIX = [
    (_ok, AckPolicy.ACK, MessageState.COMPLETED),
    (_ok, AckPolicy.NACK_ON_ERROR, MessageState.COMPLETED),
    (_ok, AckPolicy.REJECT_ON_ERROR, MessageState.COMPLETED),
    (_ok, AckPolicy.ACK_FIRST, MessageState.COMPLETED),
    (_raise, AckPolicy.ACK, MessageState.COMPLETED),
    (_raise, AckPolicy.ACK_FIRST, MessageState.COMPLETED),
    (_raise, AckPolicy.REJECT_ON_ERROR, MessageState.FAILED),
    (_raise, AckPolicy.NACK_ON_ERROR, MessageState.RETRYABLE),
    (_raise, AckPolicy.MANUAL, MessageState.RETRYABLE),  # unsettled counts as nack
    (_ok, AckPolicy.MANUAL, MessageState.RETRYABLE),
    (_ack_then_raise, AckPolicy.NACK_ON_ERROR, MessageState.COMPLETED),  # manual wins
    (_reject, AckPolicy.ACK, MessageState.FAILED),
    (_nack, AckPolicy.ACK, MessageState.RETRYABLE),
    (_raise_ack, AckPolicy.REJECT_ON_ERROR, MessageState.COMPLETED),
    (_raise_nack, AckPolicy.ACK, MessageState.RETRYABLE),
    (_raise_reject, AckPolicy.NACK_ON_ERROR, MessageState.FAILED),
]


@pytest.mark.parametrize(
    ("behaviour", "policy", "state"),
    MATRIX,
    ids=[f"{b.__name__[1:]}-{p.name}" for b, p, _ in MATRIX],
)
async def test_ack_policy_matrix(database_url, engine, tables, behaviour, policy, state):
    await _run_once(
        database_url,
        behaviour,
        ack_policy=policy,
        retry_strategy=ConstantRetryStrategy(delay_seconds=3600, max_attempts=5),
    )
    table = tables.message if state is MessageState.RETRYABLE else tables.archive
    (row,) = await rows(engine, table)
    assert row["state"] == state
    assert row["attempts_count"] == 1
    raised = behaviour in (_raise, _ack_then_raise)
    assert (row["last_error"] is not None) == raised
    if raised:
        assert "ValueError" in row["last_error"]


async def test_retries_count_attempts_then_fail_with_last_error(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber("q", retry_strategy=RETRY_TWICE, **FAST)
    async def handle(body: str, msg: SqlaMessage) -> None:
        got.record((msg.attempts_count, msg.deliveries_count, msg.first_attempt_at))
        raise RuntimeError(f"attempt {msg.attempts_count + 1} failed")

    message_id = await handle_one(broker, got, calls=3)

    assert [c[:2] for c in got.calls] == [(0, 1), (1, 2), (2, 3)]
    first_attempt = got.calls[1][2]
    assert first_attempt is not None and got.calls[2][2] == first_attempt
    (row,) = await rows(engine, tables.archive)
    assert row["id"] == message_id
    assert row["state"] == MessageState.FAILED
    assert row["attempts_count"] == 3
    assert row["deliveries_count"] == 3
    assert "RuntimeError: attempt 3 failed" in row["last_error"]
    assert row["first_attempt_at"] == first_attempt.replace(tzinfo=None)
    assert row["last_attempt_at"] > row["first_attempt_at"]
    assert await rows(engine, tables.message) == []


async def test_success_after_retry_completes(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber("q", retry_strategy=RETRY_TWICE, **FAST)
    async def handle(body: str, msg: SqlaMessage) -> None:
        got.record(msg.attempts_count)
        if msg.attempts_count == 0:
            raise RuntimeError("first try fails")

    await handle_one(broker, got, calls=2)

    (row,) = await rows(engine, tables.archive)
    assert row["state"] == MessageState.COMPLETED
    assert row["attempts_count"] == 2
    assert "first try fails" in row["last_error"]  # the history is kept


async def test_max_deliveries_fails_without_running_handler(database_url, engine, tables):
    # A message already delivered twice (e.g. it crashed two workers) is not run again.
    async with engine.begin() as conn:
        await conn.execute(
            tables.message.insert().values(
                queue="q", headers={}, payload=b'"poison"', state=MessageState.PENDING,
                attempts_count=0, deliveries_count=2,
                created_at=utc_now(), next_attempt_at=utc_now(),
            )
        )
    broker = SqlaBroker(database_url)
    got = Recorder()

    # One worker takes messages in claim order, so the canary published after the
    # poison message proves the poison message was dealt with first.
    @broker.subscriber("q", max_deliveries=2, max_workers=1, **FAST)
    async def handle(body: str) -> None:
        got.record(body)

    async with one_handled(broker, got, "alive"):
        await broker.stop()

    assert got.calls == ["alive"]
    poison, alive = await rows(engine, tables.archive)
    assert alive["state"] == MessageState.COMPLETED
    assert poison["state"] == MessageState.FAILED
    assert poison["deliveries_count"] == 3
    assert poison["attempts_count"] == 0
    assert "max_deliveries" in poison["last_error"]


