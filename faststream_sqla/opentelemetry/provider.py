"""Span attributes of our messages for FastStream's telemetry middleware."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from faststream.opentelemetry import TelemetrySettingsProvider
from faststream.opentelemetry.consts import MESSAGING_DESTINATION_PUBLISH_NAME
from opentelemetry.semconv.trace import SpanAttributes
from typing_extensions import override

from faststream_sqla.message import ClaimedMessage
from faststream_sqla.response import SqlaPublishCommand

if TYPE_CHECKING:
    from faststream.message import StreamMessage

Delivery = ClaimedMessage | list[ClaimedMessage]

MESSAGING_SYSTEM = "sqla"

#: which attempt of the message a delivery is (1 for the first)
ATTEMPT = "messaging.sqla.attempt"
#: how many times the message has been handed to a handler, this time included
DELIVERY_COUNT = "messaging.sqla.delivery_count"
#: what the subscriber made of an attempt: COMPLETED, RETRYABLE, FAILED, EXPIRED, or
#: PENDING when it was put back without spending the attempt
OUTCOME = "messaging.sqla.outcome"
#: when a RETRYABLE message is due again (ISO 8601, UTC)
NEXT_ATTEMPT_AT = "messaging.sqla.next_attempt_at"


class SqlaTelemetrySettingsProvider(TelemetrySettingsProvider[Delivery, SqlaPublishCommand]):
    __slots__ = ("messaging_system",)

    def __init__(self) -> None:
        self.messaging_system = MESSAGING_SYSTEM

    @override
    def get_consume_attrs_from_message(self, msg: StreamMessage[Delivery]) -> dict[str, Any]:
        raw = msg.raw_message
        attrs: dict[str, Any] = {
            SpanAttributes.MESSAGING_SYSTEM: self.messaging_system,
            SpanAttributes.MESSAGING_MESSAGE_ID: str(msg.message_id),
            SpanAttributes.MESSAGING_MESSAGE_CONVERSATION_ID: msg.correlation_id,
            MESSAGING_DESTINATION_PUBLISH_NAME: self.get_consume_destination_name(msg),
        }
        if isinstance(raw, list):
            attrs[SpanAttributes.MESSAGING_MESSAGE_PAYLOAD_SIZE_BYTES] = sum(
                len(item.payload) for item in raw
            )
            attrs[SpanAttributes.MESSAGING_BATCH_MESSAGE_COUNT] = len(raw)
        else:
            attrs[SpanAttributes.MESSAGING_MESSAGE_PAYLOAD_SIZE_BYTES] = len(raw.payload)
            attrs[ATTEMPT] = raw.attempts_count + 1
            attrs[DELIVERY_COUNT] = raw.deliveries_count
        return attrs

    @override
    def get_consume_destination_name(self, msg: StreamMessage[Delivery]) -> str:
        raw = msg.raw_message
        return raw[0].queue if isinstance(raw, list) else raw.queue

    @override
    def get_publish_attrs_from_cmd(self, cmd: SqlaPublishCommand) -> dict[str, Any]:
        return {
            SpanAttributes.MESSAGING_SYSTEM: self.messaging_system,
            SpanAttributes.MESSAGING_DESTINATION_NAME: cmd.destination,
            SpanAttributes.MESSAGING_MESSAGE_CONVERSATION_ID: cmd.correlation_id or "",
        }

    @override
    def get_publish_destination_name(self, cmd: SqlaPublishCommand) -> str:
        return cmd.destination


def settings_provider_factory(msg: Delivery | None) -> SqlaTelemetrySettingsProvider:
    return SqlaTelemetrySettingsProvider()
