"""Claimed rows to FastStream messages, and message bodies to rows."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from faststream.message import decode_message

from .message import ClaimedMessage, SqlaBatchMessage, SqlaMessage

if TYPE_CHECKING:
    from faststream._internal.basic_types import DecodedMessage
    from faststream.message import StreamMessage

CONTENT_TYPE_HEADER = "content-type"
REPLY_TO_HEADER = "reply-to"


class SqlaParser:
    """Parses a `ClaimedMessage` into a `SqlaMessage`."""

    async def parse_message(self, raw: ClaimedMessage) -> SqlaMessage:
        headers = raw.headers
        return SqlaMessage(
            raw_message=raw,
            body=raw.payload,
            headers=headers,
            content_type=headers.get(CONTENT_TYPE_HEADER),
            reply_to=headers.get(REPLY_TO_HEADER, ""),
            correlation_id=raw.correlation_id,
            message_id=raw.id,  # type: ignore[arg-type]  # the row id, an int
        )

    async def decode_message(self, msg: StreamMessage[Any]) -> DecodedMessage:
        return decode_message(msg)


class SqlaBatchParser(SqlaParser):
    """Parses a list of `ClaimedMessage` into one `SqlaBatchMessage`."""

    async def parse_message(self, raw: list[ClaimedMessage]) -> SqlaBatchMessage:  # type: ignore[override]
        items = [await super(SqlaBatchParser, self).parse_message(r) for r in raw]
        for item in items:  # so `await item.decode()` works inside a batch handler
            item.set_decoder(self.decode_message)
        first = items[0]
        return SqlaBatchMessage(
            raw_message=raw,
            body=[item.body for item in items],
            headers=first.headers,
            batch_headers=[item.headers for item in items],
            content_type=first.content_type,
            correlation_id=first.correlation_id,
            message_id=f"{raw[0].id}..{raw[-1].id}",
            messages=items,
        )

    async def decode_batch(self, msg: StreamMessage[Any]) -> list[DecodedMessage]:
        # each item keeps its own content type
        return [decode_message(item) for item in msg.messages]  # type: ignore[attr-defined]


def load_headers(value: Any) -> dict[str, Any]:
    """Headers as stored: a dict from JSON columns, text on some drivers."""
    if value is None:
        return {}
    if isinstance(value, (str, bytes)):
        return dict(json.loads(value))
    return dict(value)


def _aware(value: Any) -> Any:
    # asyncpg/asyncmy give naive datetimes, SQLite text; users see aware UTC
    if value is None:
        return None
    if value.__class__ is str:
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=timezone.utc)


def claimed_from_row(row: Any, claimed_at_monotonic: float) -> ClaimedMessage:
    """Hot path: one call per claimed message, so no per-field helpers beyond _aware."""
    headers = row["headers"]
    payload = row["payload"]
    return ClaimedMessage(
        id=row["id"],
        queue=row["queue"],
        headers=json.loads(headers) if headers.__class__ is str else load_headers(headers),
        payload=payload if payload.__class__ is bytes else bytes(payload),
        attempts_count=row["attempts_count"],
        deliveries_count=row["deliveries_count"],
        created_at=_aware(row["created_at"]),
        next_attempt_at=_aware(row["next_attempt_at"]),
        acquired_at=_aware(row["acquired_at"]),
        first_attempt_at=_aware(row["first_attempt_at"]),
        last_attempt_at=_aware(row["last_attempt_at"]),
        correlation_id=row["correlation_id"],
        claimed_at_monotonic=claimed_at_monotonic,
    )
