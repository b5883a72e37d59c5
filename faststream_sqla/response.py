"""Publish commands and handler responses for database queues."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Union

from faststream.response.publish_type import PublishType
from faststream.response.response import PublishCommand, Response
from typing_extensions import Unpack

from faststream_sqla.exceptions import InvalidOptionError
from faststream_sqla.options import NO_OPTIONS, DeliveryOptionArgs, DeliveryOptions, Envelope

if TYPE_CHECKING:
    from faststream._internal.basic_types import SendableMessage
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

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
        topic: str | None = None,
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
        #: publish a copy to every queue bound to this topic, instead of to `queue`
        self.topic = topic
        #: a middleware set `batch_bodies = ()`: no message left (refused at publish)
        self.emptied = False

    @property
    def batch_items(self) -> tuple[Any, ...]:
        """The messages to insert as given, `Envelope`s included (for the producer)."""
        if self.emptied and self.body is None and not self.extra_bodies:
            return ()
        return (self.body, *self.extra_bodies)

    @property
    def batch_bodies(self) -> tuple[Any, ...]:
        """The bodies of the batch, out of their envelopes: what FastStream's batch API
        (publish middlewares) reads and replaces."""
        return tuple(item.body if isinstance(item, Envelope) else item for item in self.batch_items)

    @batch_bodies.setter
    def batch_bodies(self, bodies: Sequence[Any]) -> None:
        # A middleware replaces bodies in place; each keeps its item's Envelope options.
        items = self.batch_items
        bodies = tuple(bodies)
        if not bodies:
            # FastStream's contract: nothing left, body None; the publish refuses it
            self.body, self.extra_bodies, self.emptied = None, (), True
            return
        self.emptied = False
        if len(bodies) != len(items):
            if any(isinstance(item, Envelope) for item in items):
                msg = (
                    f"a publish middleware set batch_bodies to {len(bodies)} bodies for a batch "
                    f"of {len(items)} messages, some with Envelope options of their own; "
                    "replace the bodies one for one, or set Envelope items"
                )
                raise InvalidOptionError(msg)
            self.body, *rest = bodies
            self.extra_bodies = tuple(rest)
            return
        wrapped = tuple(
            _rewrapped(item, body) if isinstance(item, Envelope) else body
            for item, body in zip(items, bodies, strict=True)
        )
        self.body, *rest = wrapped
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


def _rewrapped(item: Envelope, body: Any) -> Envelope:
    """`body` with `item`'s options, unless it brings an envelope of its own."""
    if isinstance(body, Envelope):
        return body
    envelope = Envelope(body, headers=item.headers, correlation_id=item.correlation_id)
    envelope.options = item.options
    return envelope


def check_batch_arguments(messages: tuple[Any, ...]) -> None:
    """Refuse `publish_batch([a, b])`: the messages are separate arguments, and a list
    alone would be stored as one message whose body is the list."""
    if len(messages) == 1 and isinstance(messages[0], (list, tuple)):
        kind = type(messages[0]).__name__
        msg = (
            f"publish_batch got one {kind} of {len(messages[0])} items; pass the messages as "
            f"separate arguments: publish_batch(*items, queue=...). To publish the {kind} as "
            "one message, use publish(items, queue=...)"
        )
        raise InvalidOptionError(msg)
