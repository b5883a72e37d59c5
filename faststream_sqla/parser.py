"""Claimed messages to FastStream messages, and message bodies to rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from faststream._internal._compat import json_loads
from faststream._internal.constants import ContentTypes
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
        return self.stream_message(raw)

    @staticmethod
    def stream_message(raw: ClaimedMessage) -> SqlaMessage:
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
    """Parses a list of `ClaimedMessage` into one `SqlaBatchMessage`.

    Per-item `SqlaMessage` objects are built only if the handler asks for
    `msg.messages`; the bodies are decoded straight from the claimed rows.
    """

    # a batch subscriber hands its parser a list of claimed rows, not one
    async def parse_message(self, raw: list[ClaimedMessage]) -> SqlaBatchMessage:  # type: ignore[override]
        first = raw[0]
        return SqlaBatchMessage(
            raw_message=raw,
            body=[r.payload for r in raw],
            headers=first.headers,
            batch_headers=[r.headers for r in raw],
            content_type=first.headers.get(CONTENT_TYPE_HEADER),
            correlation_id=first.correlation_id,
            message_id=f"{raw[0].id}..{raw[-1].id}",
            make_item=self.batch_item,
        )

    async def decode_batch(self, msg: StreamMessage[Any]) -> list[DecodedMessage]:
        # each item keeps its own content type; JSON, the common one, is decoded directly
        decoded: list[DecodedMessage] = []
        for raw in msg.raw_message:
            if raw.headers.get(CONTENT_TYPE_HEADER) == ContentTypes.JSON.value:
                decoded.append(json_loads(raw.payload))
            else:
                decoded.append(decode_message(self.stream_message(raw)))
        return decoded

    def batch_item(self, raw: ClaimedMessage) -> SqlaMessage:
        item = self.stream_message(raw)
        item.set_decoder(self.decode_message)  # so `await item.decode()` works
        return item
