"""Every duration the API takes is seconds or a timedelta: `msg.nack(delay=...)`,
`msg.defer(delay)`, a batch's `nack(delay=...)` and the subscriber's interval and
timeout options, as `publish(delay=...)` and schedules already were; on every database."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from faststream_sqla import InvalidOptionError, SqlaBroker, SqlaMessage
from faststream_sqla.message import SqlaBatchMessage

from tests.support.helpers import FAST, Recorder, rows

TEN_MINUTES = timedelta(minutes=10)


def naive_utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)  # stored times are naive UTC


async def test_nack_and_defer_take_a_timedelta(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    seen = Recorder()

    @broker.subscriber("nacked", **FAST)
    async def nacked(body: str, msg: SqlaMessage) -> None:
        await msg.nack(delay=TEN_MINUTES)
        seen.record("nacked")

    @broker.subscriber("deferred", **FAST)
    async def deferred(body: str, msg: SqlaMessage) -> None:
        await msg.defer(TEN_MINUTES, state={"step": 1})
        seen.record("deferred")

    @broker.subscriber("batched", batch=True, **FAST)
    async def batched(bodies: list[str], msg: SqlaMessage) -> None:
        assert isinstance(msg, SqlaBatchMessage)
        await msg.nack(delay=TEN_MINUTES)
        seen.record("batched")

    before = naive_utc_now()
    async with broker:
        await broker.start()
        for queue in ("nacked", "deferred", "batched"):
            await broker.publish("x", queue=queue)
        assert sorted(await seen.wait_for(3)) == ["batched", "deferred", "nacked"]
    after = naive_utc_now()
    waiting = await rows(engine, tables.message)
    assert sorted(r["queue"] for r in waiting) == ["batched", "deferred", "nacked"]
    for row in waiting:
        # due ten minutes after the handler ran, which was between before and after
        assert before + TEN_MINUTES - timedelta(seconds=1) <= row["next_attempt_at"], row
        assert row["next_attempt_at"] <= after + TEN_MINUTES + timedelta(seconds=1), row


async def test_a_negative_timedelta_is_refused_by_name(database_url):
    broker = SqlaBroker(database_url)
    seen = Recorder()

    @broker.subscriber("refused", **FAST)
    async def handle(body: str, msg: SqlaMessage) -> None:
        for settle in (lambda: msg.nack(delay=-TEN_MINUTES), lambda: msg.defer(-TEN_MINUTES)):
            with pytest.raises(InvalidOptionError, match="delay must be 0 to") as raised:
                await settle()
            seen.record(str(raised.value))
        await msg.ack()

    async with broker:
        await broker.start()
        await broker.publish("x", queue="refused")
        nack_error, defer_error = await seen.wait_for(2)
    assert nack_error.startswith("nack delay") and defer_error.startswith("defer delay")


def test_subscriber_durations_take_a_timedelta_and_keep_seconds():
    broker = SqlaBroker("sqlite+aiosqlite:///unused.db")
    sub = broker.subscriber(
        "q",
        min_fetch_interval=timedelta(milliseconds=10),
        max_fetch_interval=timedelta(seconds=2),
        flush_interval=timedelta(milliseconds=50),
        release_stuck_interval=timedelta(seconds=5),
        release_stuck_timeout=timedelta(minutes=1),
        handler_timeout=timedelta(minutes=2),
        circuit_breaker_threshold=3,
        circuit_breaker_cooldown=timedelta(seconds=45),
    )
    options = sub.options
    assert (
        options.min_fetch_interval,
        options.max_fetch_interval,
        options.flush_interval,
        options.release_stuck_interval,
        options.release_stuck_timeout,
        options.handler_timeout,
        options.circuit_breaker_cooldown,
    ) == (0.01, 2.0, 0.05, 5.0, 60.0, 120.0, 45.0)
    with pytest.raises(InvalidOptionError, match="handler_timeout must be more than 0"):
        broker.subscriber("other", handler_timeout=timedelta(0))
