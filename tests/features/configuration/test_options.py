"""Subscriber and broker options are checked when they are given: bad values, bad queue
names and bad table names are typed errors that show the value, without a database."""

from __future__ import annotations

import pytest

from faststream_sqla import SqlaBroker, SqlaRouter, TestSqlaBroker
from faststream_sqla.exceptions import InvalidOptionError, InvalidQueueNameError, shown


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


def test_an_error_shows_a_value_whole_up_to_100_characters_then_its_start_and_length():
    assert shown("q" * 100) == repr("q" * 100)
    assert shown("q" * 10_000) == repr("q" * 100) + "... (10000 characters)"
    assert shown("a\nb") == "'a\\nb'"  # control characters escaped, as repr does
    assert shown(list(range(1000))).endswith("... (4890 characters in all)")
    assert len(shown(list(range(1000)))) < 130
    # repr() of an int of over 4,300 digits raises ValueError
    assert shown(10**5000) == f"an integer of {(10**5000).bit_length()} bits"
    assert shown(None) == "None" and shown(2**64) == str(2**64)
