"""Option validation, and the message state machine as pure functions."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from faststream.message import AckStatus
from faststream_sqla import MessageState, SqlaBroker, SqlaRouter, TestSqlaBroker
from faststream_sqla import lifecycle
from faststream_sqla.exceptions import InvalidOptionError, InvalidQueueNameError, shown
from faststream_sqla.message import ClaimedMessage
from faststream_sqla.parser import HeadersCache, SqlaBatchParser, SqlaParser
from faststream_sqla.retry import ConstantRetryStrategy

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=timezone.utc)


def naive(value: datetime) -> datetime:
    return value.astimezone(timezone.utc).replace(tzinfo=None)


# -- options ------------------------------------------------------------------------


@pytest.fixture
def broker(tmp_path) -> SqlaBroker:
    return SqlaBroker(f"sqlite+aiosqlite:///{tmp_path}/never-created.db")


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"max_workers": 0}, "max_workers"),
        ({"fetch_batch_size": 0}, "fetch_batch_size"),
        ({"overfetch_factor": 0.5}, "overfetch_factor"),
        ({"min_fetch_interval": 2.0, "max_fetch_interval": 1.0}, "min_fetch_interval"),
        ({"flush_interval": -0.1}, "flush_interval"),
        ({"release_stuck_timeout": 0}, "release_stuck_timeout"),
        ({"max_deliveries": 0}, "max_deliveries"),
        ({"retry_strategy": "x"}, "retry_strategy"),
        ({"max_fetch_interval": float("inf")}, "max_fetch_interval"),
        ({"max_workers": True}, "max_workers"),
        ({"max_fetch_batch_size": 0}, "max_fetch_batch_size"),
        ({"fetch_batch_size": 50, "max_fetch_batch_size": 49}, "max_fetch_batch_size"),
    ],
)
def test_invalid_subscriber_option(broker: SqlaBroker, kwargs, names) -> None:
    with pytest.raises(InvalidOptionError, match=names):
        broker.subscriber("q", **kwargs)
    assert not list(broker.subscribers)


@pytest.mark.parametrize(
    ("queues", "match"),
    [
        ([], "at least one queue"),
        (["a", "b", "a"], "repeat"),
        (["a", 5], "must be a str"),
        ("", "empty"),
        ("q" * 256, "255"),
        ("a\nb", "control characters"),
    ],
)
def test_invalid_subscriber_queues(broker: SqlaBroker, queues, match) -> None:
    with pytest.raises(InvalidOptionError, match=match):
        broker.subscriber(queues)
    assert not list(broker.subscribers)


def test_valid_options_accepted(broker: SqlaBroker) -> None:
    sub = broker.subscriber(["a", "b"], max_workers=3, fetch_batch_size=10, overfetch_factor=1.5)
    assert sub.queues == ("a", "b")
    assert sub.options.buffer_capacity == 15
    assert sub.options.largest_claim == 1000


def test_largest_claim_follows_the_options(broker: SqlaBroker) -> None:
    assert broker.subscriber("a", fetch_batch_size=5000).options.largest_claim == 5000
    pinned = broker.subscriber("b", fetch_batch_size=20, max_fetch_batch_size=20)
    assert pinned.options.largest_claim == 20


def test_non_str_queue_argument_is_typed_error(broker: SqlaBroker) -> None:
    with pytest.raises(InvalidQueueNameError):
        broker.subscriber(5)  # type: ignore[arg-type]


async def test_router_prefix_counts_towards_queue_name_limit(broker: SqlaBroker) -> None:
    router = SqlaRouter(prefix="svc.")
    router.subscriber("q" * 255)
    with pytest.raises(InvalidQueueNameError):
        broker.include_router(router)
        async with TestSqlaBroker(broker):
            pass


def test_broker_rejects_bad_url_and_table_names() -> None:
    with pytest.raises(InvalidOptionError, match="not a database URL"):
        SqlaBroker("not a url")
    with pytest.raises(InvalidOptionError, match="bad name!"):
        SqlaBroker(message_table="bad name!")
    with pytest.raises(InvalidOptionError):
        SqlaBroker(archive_table="x" * 49)
    assert SqlaBroker(message_table="jobs", archive_table="jobs_done").tables.message.name == "jobs"


def test_same_message_and_archive_table_is_rejected() -> None:
    with pytest.raises(InvalidOptionError):
        SqlaBroker(message_table="jobs", archive_table="jobs")


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


@pytest.mark.parametrize("arrived", [[0, 1, 2, 3], [2, 0, 3, 1]])
def test_postgresql_claim_arrays_become_rows_oldest_first(arrived) -> None:
    # (priority DESC, next_attempt_at, id) orders a claim; batch publishes share
    # next_attempt_at
    from faststream_sqla.dialects.base import CLAIMED_COLUMNS
    from faststream_sqla.dialects.postgresql import rows_from_columns

    due = [naive(T0), naive(T0), naive(T0 + timedelta(seconds=1)), naive(T0 - timedelta(seconds=2))]
    ids = [7, 9, 3, 1]  # higher priority first, then by due time, then id
    priority = [5, 5, 5, 0]
    values = {"id": ids, "next_attempt_at": due, "priority": priority}

    def column(name: str) -> list:  # the arrays in the order the server sent them
        return [values[name][k] if name in values else f"{name}-{ids[k]}" for k in arrived]

    columns = [column(name) for name in CLAIMED_COLUMNS]
    rows = rows_from_columns(columns)
    assert [row[0] for row in rows] == ids
    assert all(row[1] == f"queue-{row[0]}" for row in rows)  # each row kept together


def test_postgresql_outcome_parameters_are_array_text_and_exact_microseconds() -> None:
    from faststream_sqla.clock import micros_since_epoch
    from faststream_sqla.dialects.base import Outcome
    from faststream_sqla.dialects.postgresql import array_literal, outcome_parameters
    from faststream_sqla.schema import MessageState

    assert array_literal([1, None, -3]) == "{1,NULL,-3}"
    assert array_literal([]) == "{}"
    first = datetime(2026, 11, 22, 7, 0, 0, 123456)
    assert micros_since_epoch(first) == 1795330800123456
    assert micros_since_epoch(None) is None

    done = Outcome(5, 1, MessageState.COMPLETED, 1, 1, first, first)
    params = outcome_parameters([done])
    assert params["ids"] == "{5}" and params["states"] == "{COMPLETED}"
    assert params["first_us"] == "{1795330800123456}"
    # no array to encode when nothing is retried or failed (unnest pads with NULLs)
    assert params["next_us"] is None and params["errors"] is None

    failed = Outcome(6, 2, MessageState.RETRYABLE, 2, 2, first, first, first, 'boom "quoted", {braced}')
    params = outcome_parameters([done, failed])
    assert params["states"] == "{COMPLETED,RETRYABLE}"
    assert params["next_us"] == "{NULL,1795330800123456}"
    assert params["errors"] == [None, 'boom "quoted", {braced}']  # free text stays a list


async def test_publish_encodes_like_the_codec_it_skips(broker: SqlaBroker) -> None:
    # With FastStream's default codec the producer calls encode_message itself (no
    # coroutine per body); rows must be what the codec's own encode gives.
    from faststream._internal.parser import DefaultCodec
    from faststream.response.publish_type import PublishType

    from faststream_sqla.response import SqlaPublishCommand

    class SameAsDefault(DefaultCodec):  # not the default type: the codec is awaited
        __slots__ = ()

    bodies = ("text", b"\x00raw", {"a": [1, 2]}, 7, None, [1.5, "x"])
    cmd = SqlaPublishCommand(*bodies, queue="q", _publish_type=PublishType.PUBLISH)
    producer = broker.config.producer
    direct = await producer.build_rows(cmd, cmd.batch_items)
    producer.codec = SameAsDefault()
    awaited = await producer.build_rows(cmd, cmd.batch_items)
    assert [(r.payload, r.headers) for r in direct] == [(r.payload, r.headers) for r in awaited]


def test_an_error_shows_a_value_whole_up_to_100_characters_then_its_start_and_length():
    assert shown("q" * 100) == repr("q" * 100)
    assert shown("q" * 10_000) == repr("q" * 100) + "... (10000 characters)"
    assert shown("a\nb") == "'a\\nb'"  # control characters escaped, as repr does
    assert shown(list(range(1000))).endswith("... (4890 characters in all)")
    assert len(shown(list(range(1000)))) < 130
    # repr() of an int of over 4,300 digits raises ValueError
    assert shown(10**5000) == f"an integer of {(10**5000).bit_length()} bits"
    assert shown(None) == "None" and shown(2**64) == str(2**64)
