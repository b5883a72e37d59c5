"""A claimed row becomes the same ClaimedMessage whichever reader the driver takes."""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime

from faststream_sqla.drivers.claimed_rows import claimed_from_row, claimed_reader
from faststream_sqla.schema import CLAIMED_COLUMNS

WHEN = datetime(2026, 11, 28, 2, 30, 0, 123456)


def typed_row(**values: object) -> tuple[object, ...]:
    """A row as asyncpg and asyncmy return it: datetimes, bytes-like payloads."""
    row = {
        "id": 7,
        "queue": "orders",
        "headers": '{"content-type": "application/json"}',
        "payload": memoryview(b'{"id": 1}'),
        "attempts_count": 0,
        "deliveries_count": 1,
        "created_at": WHEN,
        "next_attempt_at": WHEN,
        "acquired_at": WHEN,
        "first_attempt_at": None,
        "last_attempt_at": None,
        "correlation_id": "c-1",
        "claims_count": 1,
        "expires_at": None,
        "priority": 3,
        "ordering_key": None,
        "idempotency_key": None,
        "channel": None,
        "saved_state": None,
        **values,
    }
    return tuple(row[name] for name in CLAIMED_COLUMNS)


def test_a_typed_row_reads_the_same_through_both_readers() -> None:
    row = typed_row()
    fast = claimed_reader(times_as_text=False)(row, 1.5)
    generic = claimed_from_row(row, 1.5)
    for field in fields(fast):
        assert getattr(fast, field.name) == getattr(generic, field.name), field.name
    assert fast.payload == b'{"id": 1}' and type(fast.payload) is bytes
    assert fast.headers == {"content-type": "application/json"}
    assert fast.claimed_at_monotonic == 1.5


def test_text_times_are_read_as_datetimes_by_the_text_reader() -> None:
    row = typed_row(created_at=WHEN.isoformat(sep=" "), expires_at=WHEN.isoformat(sep=" "))
    claimed = claimed_reader(times_as_text=True)(row, 0.0)
    assert claimed.created_at == WHEN and claimed.expires_at == WHEN


def test_missing_headers_read_as_an_empty_dict() -> None:
    assert claimed_reader(times_as_text=False)(typed_row(headers=None), 0.0).headers == {}
