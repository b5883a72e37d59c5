"""Publish commands and handler responses for database queues."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Union

from typing_extensions import Unpack

from faststream.response.publish_type import PublishType
from faststream.response.response import PublishCommand, Response

from faststream_sqla.options import NO_OPTIONS, DeliveryOptionArgs, DeliveryOptions

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    from faststream._internal.basic_types import SendableMessage

Connection = Union["AsyncConnection", "AsyncSession"]


class SqlaResponse(Response):
    """Return this from a handler to set delivery options on the published reply."""

    def __init__(
        self,
        body: SendableMessage,
        *,
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        **options: Unpack[DeliveryOptionArgs],
    ) -> None:
        super().__init__(body=body, headers=headers, correlation_id=correlation_id)
        self.options = DeliveryOptions.given(**options)

    def as_publish_command(self) -> SqlaPublishCommand:
        return SqlaPublishCommand(
            self.body,
            headers=self.headers,
            correlation_id=self.correlation_id,
            options=self.options,
            _publish_type=PublishType.PUBLISH,
        )


class SqlaPublishCommand(PublishCommand):
    """A publish on its way through middlewares to the producer. `body` and
    `extra_bodies` (a batch) may be `Envelope`s carrying options of their own."""

    def __init__(
        self,
        message: SendableMessage,
        /,
        *messages: SendableMessage,
        queue: str = "",
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        reply_to: str = "",
        options: DeliveryOptions = NO_OPTIONS,
        connection: Connection | None = None,
        _publish_type: PublishType,
    ) -> None:
        super().__init__(
            body=message,
            destination=queue,
            correlation_id=correlation_id,
            headers=headers,
            reply_to=reply_to,
            _publish_type=_publish_type,
        )
        self.extra_bodies = messages
        self.options = options
        self.connection = connection

    @property
    def batch_bodies(self) -> tuple[Any, ...]:
        return (self.body, *self.extra_bodies)

    @batch_bodies.setter
    def batch_bodies(self, bodies: Sequence[Any]) -> None:
        # FastStream's batch middlewares replace the bodies this way
        self.body, *rest = bodies if bodies else (None,)
        self.extra_bodies = tuple(rest)

    @classmethod
    def from_cmd(
        cls, cmd: PublishCommand | SqlaPublishCommand, *, batch: bool = False
    ) -> SqlaPublishCommand:
        if isinstance(cmd, SqlaPublishCommand):
            return cmd
        body, extra = cmd.body, ()
        if batch and isinstance(body, (list, tuple)) and body:
            body, extra = body[0], tuple(body[1:])
        return cls(
            body,
            *extra,
            queue=cmd.destination,
            correlation_id=cmd.correlation_id,
            headers=cmd.headers,
            reply_to=cmd.reply_to,
            _publish_type=cmd.publish_type,
        )
