"""The message state machine as pure functions (faststream_sqla.lifecycle): what an attempt,
a decision or a release writes, and how a message or a batch records its decisions,
without a database."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from faststream.message import AckStatus

from faststream_sqla import MessageState, lifecycle
from faststream_sqla.exceptions import InvalidOptionError
from faststream_sqla.message import ClaimedMessage
from faststream_sqla.drivers.claimed_rows import HeadersCache
from faststream_sqla.parser import SqlaBatchParser, SqlaParser
from faststream_sqla.retry import ConstantRetryStrategy

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=timezone.utc)


def naive(value: datetime) -> datetime:
    return value.astimezone(timezone.utc).replace(tzinfo=None)


# -- lifecycle ----------------------------------------------------------------------


def claimed(**overrides) -> ClaimedMessage:
    fields = {
        "id": 42,
        "queue": "q",
        "headers": {},
        "payload": b"{}",
        "attempts_count": 0,
        "deliveries_count": 1,
        "created_at": T0,
        "next_attempt_at": T0,
        "acquired_at": T0,
        "claimed_at_monotonic": 100.0,
    }
    merged = {**fields, **overrides}
    # a message never given back unstarted: every claim was a delivery
    merged.setdefault("claims_count", merged["deliveries_count"])
    return ClaimedMessage(**merged)


STRATEGY = ConstantRetryStrategy(delay_seconds=10, max_attempts=3)


def attempt(msg: ClaimedMessage, *, error: BaseException | None = None, started=T0, took=1.0):
    return lifecycle.after_attempt(
        msg,
        started_at=started,
        finished_at=started + timedelta(seconds=took),
        error=error,
        retry_strategy=STRATEGY,
    )


@pytest.mark.parametrize("first_attempt_at", [None, naive(T0 - timedelta(hours=1))])
def test_completed_is_after_attempt_for_an_acked_claimed_message(first_attempt_at) -> None:
    # the per-message shortcut must write exactly what the general rule writes
    msg = claimed(
        attempts_count=1, deliveries_count=2, first_attempt_at=first_attempt_at,
        created_at=naive(T0), next_attempt_at=naive(T0), acquired_at=naive(T0),
        decision=AckStatus.ACKED,
    )
    started = naive(T0 + timedelta(minutes=5))
    general = lifecycle.after_attempt(
        msg, started_at=started, finished_at=started, error=None, retry_strategy=STRATEGY
    )
    assert lifecycle.completed(msg, started) == general


def test_ack_completes_and_keeps_first_attempt() -> None:
    first = T0 - timedelta(hours=1)
    started = T0 + timedelta(minutes=5)
    msg = claimed(
        attempts_count=1, deliveries_count=2, first_attempt_at=first, decision=AckStatus.ACKED
    )
    out = attempt(msg, started=started)
    assert out.state is MessageState.COMPLETED
    assert out.archives
    assert (out.id, out.token, out.attempts_count, out.deliveries_count) == (42, 2, 2, 2)
    assert out.first_attempt_at == naive(first)
    assert out.last_attempt_at == naive(started)
    assert out.first_attempt_at.tzinfo is None
    assert out.last_error is None


def test_first_attempt_sets_first_attempt_at() -> None:
    out = attempt(claimed(decision=AckStatus.ACKED))
    assert out.attempts_count == 1
    assert out.first_attempt_at == out.last_attempt_at == naive(T0)


def test_reject_fails() -> None:
    out = attempt(claimed(decision=AckStatus.REJECTED))
    assert out.state is MessageState.FAILED
    assert out.archives
    assert out.attempts_count == 1


def test_nack_retries_after_strategy_delay() -> None:
    out = attempt(claimed(decision=AckStatus.NACKED), took=2.5)
    assert out.state is MessageState.RETRYABLE
    assert not out.archives
    assert out.next_attempt_at == naive(T0 + timedelta(seconds=2.5 + 10))


def test_nack_at_max_attempts_fails() -> None:
    out = attempt(claimed(decision=AckStatus.NACKED, attempts_count=2))
    assert out.attempts_count == 3
    assert out.state is MessageState.FAILED
    assert out.next_attempt_at is None


def test_nack_delay_overrides_delay_not_max_attempts() -> None:
    out = attempt(claimed(decision=AckStatus.NACKED, nack_delay=0.5), took=1.0)
    assert out.state is MessageState.RETRYABLE
    assert out.next_attempt_at == naive(T0 + timedelta(seconds=1.5))
    out = attempt(claimed(decision=AckStatus.NACKED, nack_delay=0.5, attempts_count=2))
    assert out.state is MessageState.FAILED


def test_no_decision_is_a_nack() -> None:
    out = attempt(claimed(decision=None))
    assert out.state is MessageState.RETRYABLE
    assert out.next_attempt_at == naive(T0 + timedelta(seconds=11))
    assert attempt(claimed(decision=None, attempts_count=2)).state is MessageState.FAILED


def _raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as e:  # noqa: BLE001
        return e


def test_error_is_recorded() -> None:
    out = attempt(claimed(decision=AckStatus.NACKED), error=_raised(KeyError("missing-key")))
    assert out.state is MessageState.RETRYABLE
    assert "KeyError" in out.last_error
    assert "missing-key" in out.last_error
    assert len(out.last_error) <= lifecycle.MAX_ERROR_LENGTH


def test_huge_error_is_truncated_keeping_its_tail() -> None:
    error = _raised(ValueError("x" * 100 + "THE-END"))
    error.__cause__ = _raised(RuntimeError("y" * (3 * lifecycle.MAX_ERROR_LENGTH)))
    text = lifecycle.describe_error(error)
    assert len(text) < lifecycle.MAX_ERROR_LENGTH + 10
    assert text.rstrip().endswith("THE-END")
    assert "ValueError" in text


def test_huge_error_is_bounded_and_keeps_type() -> None:
    text = lifecycle.describe_error(_raised(ValueError("x" * (2 * lifecycle.MAX_ERROR_LENGTH))))
    assert len(text) <= lifecycle.MAX_ERROR_LENGTH
    assert "ValueError" in text


def test_deliveries_exceeded_fails_without_attempt() -> None:
    msg = claimed(attempts_count=1, deliveries_count=6, first_attempt_at=T0)
    out = lifecycle.deliveries_exceeded(msg, max_deliveries=5)
    assert out.state is MessageState.FAILED
    assert (out.attempts_count, out.deliveries_count, out.token) == (1, 6, 6)
    assert out.first_attempt_at == naive(T0)
    assert "max_deliveries" in out.last_error
    assert "6" in out.last_error


@pytest.mark.parametrize(("started", "deliveries"), [(False, 2), (True, 3)])
def test_released(started: bool, deliveries: int) -> None:
    msg = claimed(attempts_count=1, deliveries_count=3, first_attempt_at=T0)
    out = lifecycle.released(msg, started=started)
    assert out.state is MessageState.PENDING
    assert not out.archives
    assert out.deliveries_count == deliveries
    assert out.token == 3  # fenced on the delivery as claimed
    assert out.attempts_count == 1


def test_db_time_adds_local_elapsed_time() -> None:
    msg = claimed(acquired_at=T0, claimed_at_monotonic=100.0)
    assert lifecycle.db_time(msg, 100.0) == T0
    assert lifecycle.db_time(msg, 103.25) == T0 + timedelta(seconds=3.25)


# -- SqlaMessage decisions ------------------------------------------------------------


@pytest.mark.parametrize("delay", [-1, float("nan")])
async def test_nack_negative_delay_rejected(delay: float) -> None:
    raw = claimed()
    msg = await SqlaParser().parse_message(raw)
    with pytest.raises(InvalidOptionError, match="delay"):
        await msg.nack(delay=delay)
    assert raw.decision is None
    assert msg.committed is None


async def test_first_decision_wins() -> None:
    raw = claimed()
    msg = await SqlaParser().parse_message(raw)
    await msg.nack(delay=3)
    await msg.ack()
    assert (raw.decision, raw.nack_delay) == (AckStatus.NACKED, 3)
    assert lifecycle.after_attempt(
        raw, started_at=T0, finished_at=T0, error=None, retry_strategy=STRATEGY
    ).next_attempt_at == naive(T0 + timedelta(seconds=3))


# -- batch messages ---------------------------------------------------------------------


async def test_batch_settles_every_item_without_building_per_item_messages() -> None:
    raws = [claimed(id=i, headers={"content-type": "application/json"}, payload=b"%d" % i)
            for i in range(3)]
    parser = SqlaBatchParser()
    msg = await parser.parse_message(raws)
    msg.set_decoder(parser.decode_batch)  # as FastStream does
    assert await msg.decode() == [0, 1, 2]
    await msg.nack(delay=7)
    assert msg._messages is None  # the handler never asked for them
    assert [(r.decision, r.nack_delay) for r in raws] == [(AckStatus.NACKED, 7.0)] * 3


async def test_batch_decisions_on_items_take_precedence() -> None:
    raws = [claimed(id=i, headers={"content-type": "text/plain"}, payload=b"t%d" % i)
            for i in range(3)]
    parser = SqlaBatchParser()
    msg = await parser.parse_message(raws)
    msg.set_decoder(parser.decode_batch)
    assert await msg.decode() == ["t0", "t1", "t2"]  # non-JSON types decode per item
    await msg.messages[1].reject()
    assert await msg.messages[0].decode() == "t0"
    await msg.ack()
    assert [r.decision for r in raws] == [AckStatus.ACKED, AckStatus.REJECTED, AckStatus.ACKED]
    assert all(item.committed is not None for item in msg.messages)
    with pytest.raises(InvalidOptionError, match="delay"):
        await msg.nack(delay=-1)


def test_header_cache_gives_each_message_its_own_dict() -> None:
    cache = HeadersCache(capacity=2)
    first = cache.load('{"content-type": "application/json", "n": 1}')
    first["mutated"] = True
    again = cache.load('{"content-type": "application/json", "n": 1}')
    assert again == {"content-type": "application/json", "n": 1}
    nested = '{"tags": ["a"]}'
    one, two = cache.load(nested), cache.load(nested)
    one["tags"].append("b")
    assert two == {"tags": ["a"]}  # nested values are never shared: not cached
    for i in range(5):  # bounded whatever the variety of header documents
        cache.load(f'{{"k": {i}}}')
    assert len(cache._decoded) <= 2
    assert cache.load({"already": "decoded"}) == {"already": "decoded"}
    # a hand-edited row must not make every claim of its queue fail
    assert cache.load("not json") == {} and cache.load("[1, 2]") == {}
