"""What FastStream's Prometheus middleware needs to know about our messages: the
queue (the metrics' `handler` and `destination` label) and how many messages a
delivery holds (a batch handler's call holds several)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from faststream.prometheus import ConsumeAttrs, MetricsSettingsProvider
from typing_extensions import override

from faststream_sqla.message import ClaimedMessage
from faststream_sqla.response import SqlaPublishCommand

if TYPE_CHECKING:
    from faststream.message import StreamMessage

MESSAGING_SYSTEM = "sqla"

Delivery = ClaimedMessage | list[ClaimedMessage]


class SqlaMetricsSettingsProvider(MetricsSettingsProvider[Delivery, SqlaPublishCommand]):
    """One message per delivery."""

    __slots__ = ("messaging_system",)

    def __init__(self) -> None:
        self.messaging_system = MESSAGING_SYSTEM

    @override
    def get_consume_attrs_from_message(self, msg: StreamMessage[Delivery]) -> ConsumeAttrs:
        raw = msg.raw_message
        assert isinstance(raw, ClaimedMessage)
        return {
            "destination_name": raw.queue,
            "message_size": len(raw.payload),
            "messages_count": 1,
        }

    @override
    def get_publish_destination_name_from_cmd(self, cmd: SqlaPublishCommand) -> str:
        return cmd.destination


class SqlaBatchMetricsSettingsProvider(SqlaMetricsSettingsProvider):
    """A batch handler's call: every message of the list counts."""

    __slots__ = ()

    @override
    def get_consume_attrs_from_message(self, msg: StreamMessage[Delivery]) -> ConsumeAttrs:
        raw = msg.raw_message
        assert isinstance(raw, list)
        return {
            "destination_name": raw[0].queue,
            "message_size": sum(len(item.payload) for item in raw),
            "messages_count": len(raw),
        }


def settings_provider_factory(msg: Delivery | None) -> SqlaMetricsSettingsProvider:
    """`msg` is what a subscriber claimed (None on the publishing side)."""
    if isinstance(msg, list):
        return SqlaBatchMetricsSettingsProvider()
    return SqlaMetricsSettingsProvider()
