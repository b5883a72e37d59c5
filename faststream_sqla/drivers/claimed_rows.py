"""Claimed rows as the drivers return them, read into `ClaimedMessage`s.

Each driver returns a claim's rows in `schema.CLAIMED_COLUMNS` order, as its database
driver gives them (times as text on SQLite, JSON headers as text, memoryview payloads);
the reader here turns them into the typed `ClaimedMessage` the rest of the package
handles, once per claimed message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

from faststream_sqla.message import ClaimedMessage
from faststream_sqla.schema import CLAIMED_COLUMNS, MESSAGE_COLUMN, Headers, Payload, Timestamp


def load_headers(value: Any) -> dict[str, Any]:
    """Headers as stored: a dict from JSON columns, text on some drivers."""
    if value is None:
        return {}
    if isinstance(value, (str, bytes)):
        return dict(json.loads(value))
    return dict(value)


class HeadersCache:
    """Decoded headers by their stored text.

    Most messages of a queue carry the same few header documents, and a dict copy is
    several times cheaper than decoding JSON. Only flat documents (scalar values) are
    kept, so no two messages ever share a mutable value; each caller gets its own copy.
    """

    SCALARS = (str, int, float, bool, type(None))

    def __init__(self, capacity: int = 512) -> None:
        self.capacity = capacity
        self._decoded: dict[str, dict[str, Any]] = {}

    def load(self, value: Any) -> dict[str, Any]:
        if value.__class__ is not str:
            return load_headers(value)
        cached = self._decoded.get(value)
        if cached is not None:
            return cached.copy()
        try:
            headers = json.loads(value)
        except ValueError:
            headers = None
        if not isinstance(headers, dict):
            # Only a hand-edited row can hold this; one bad row must not stop the
            # claims of a whole queue, so the message goes on without headers.
            return {}
        if all(isinstance(v, self.SCALARS) for v in headers.values()):
            if len(self._decoded) >= self.capacity:
                self._decoded.clear()  # unbounded variety: start over, stay bounded
            self._decoded[value] = headers.copy()
        return headers


_headers = HeadersCache()

#: headers as stored (JSON text or a decoded document) to a dict of the message's own,
#: through the cache every claimed row shares
stored_headers = _headers.load


def _stored_time(value: Any) -> Any:
    # asyncpg and asyncmy return naive datetimes already; SQLite returns text
    if value.__class__ is str:
        return datetime.fromisoformat(value)
    return value


def _stored_time_or_none(value: Any) -> Any:
    return None if value is None else _stored_time(value)


def _payload(value: Any) -> bytes:
    return value if value.__class__ is bytes else bytes(value)


def _converters() -> tuple[tuple[int, Callable[[Any], Any]], ...]:
    """(position, conversion) for each claimed column whose stored value is not yet
    what `ClaimedMessage` holds, found from the column's type."""
    by_type: dict[int, Callable[[Any], Any]] = {
        id(Headers): _headers.load,
        id(Payload): _payload,
        id(Timestamp): _stored_time_or_none,
    }
    return tuple(
        (i, by_type[id(MESSAGE_COLUMN[name].type)])
        for i, name in enumerate(CLAIMED_COLUMNS)
        if id(MESSAGE_COLUMN[name].type) in by_type
    )


_CONVERSIONS = _converters()


def claimed_from_row(row: Sequence[Any], claimed_at_monotonic: float) -> ClaimedMessage:
    """One claimed row, its values in `schema.CLAIMED_COLUMNS` order (the order of
    `ClaimedMessage`'s first fields).

    Hot path: one call per claimed message, so plain positional work only.
    """
    values = list(row)
    for position, convert in _CONVERSIONS:
        values[position] = convert(values[position])
    values.append(claimed_at_monotonic)  # positional: a keyword costs a dict per call
    return ClaimedMessage(*values)


# The claimed columns are ClaimedMessage's first fields, claimed_at_monotonic next:
# the readers below fill them by position
assert [f.name for f in fields(ClaimedMessage)][: len(CLAIMED_COLUMNS) + 1] == [
    *CLAIMED_COLUMNS,
    "claimed_at_monotonic",
], "ClaimedMessage's fields no longer start with the claimed columns"

_HEADERS_AT = CLAIMED_COLUMNS.index("headers")
_PAYLOAD_AT = CLAIMED_COLUMNS.index("payload")
assert {position for position, _ in _CONVERSIONS} - {_HEADERS_AT, _PAYLOAD_AT} == {
    i for i, name in enumerate(CLAIMED_COLUMNS) if MESSAGE_COLUMN[name].type is Timestamp
}, "a typed row needs its headers and payload converted, and nothing else"


def _claimed_from_typed_row(row: Sequence[Any], claimed_at_monotonic: float) -> ClaimedMessage:
    """`claimed_from_row` for a driver that returns times as datetimes (asyncpg,
    asyncmy): only the headers and the payload need converting."""
    values = list(row)
    values[_HEADERS_AT] = _headers.load(values[_HEADERS_AT])
    payload = values[_PAYLOAD_AT]
    if payload.__class__ is not bytes:
        values[_PAYLOAD_AT] = bytes(payload)
    values.append(claimed_at_monotonic)  # positional: a keyword costs a dict per call
    return ClaimedMessage(*values)


def claimed_reader(*, times_as_text: bool) -> Callable[[Sequence[Any], float], ClaimedMessage]:
    """The claimed-row reader for a driver: `times_as_text` where it returns stored
    times as text (SQLite's), which only the generic reader converts."""
    return claimed_from_row if times_as_text else _claimed_from_typed_row
