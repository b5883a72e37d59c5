"""Publishes a handler's reply to the queue named in the message's reply-to header."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from faststream._internal.endpoint.publisher.fake import FakePublisher

from faststream_sqla.response import SqlaPublishCommand

if TYPE_CHECKING:
    from faststream._internal.producer import ProducerProto
    from faststream.response.response import PublishCommand


class SqlaFakePublisher(FakePublisher):
    def __init__(self, producer: ProducerProto[Any], queue: str) -> None:
        super().__init__(producer=producer)
        self.queue = queue

    def patch_command(self, cmd: PublishCommand | SqlaPublishCommand) -> SqlaPublishCommand:
        cmd = super().patch_command(cmd)
        real = SqlaPublishCommand.from_cmd(cmd)
        real.destination = self.queue
        return real
